package pipeline

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
)

// parseYAML reads src with go-yaml in time and memory that grow linearly
// with its size. go-yaml alone is quadratic in several ways (20 KB of
// nested '[' took it about a second and 1.1 GB of allocations; 120 KB ran
// a 24 GB machine out of memory), so each stage is bounded before it runs:
//
//   - checkText: the size, UTF-8, and the text that makes the lexer
//     quadratic (runs of '<', tabs in long lines, long runs of blank lines);
//   - prescan: the number of tokens the lexer will make (it keeps them all,
//     about 300 bytes each) and the nesting of flow collections;
//   - checkTokens: on the lexer's tokens, the parser's nesting and the
//     work it would do on key paths, block mappings and empty values.
//
// Every refusal is one located Error with an empty path.
func parseYAML(file string, src []byte) (*ast.File, *Error) {
	if len(src) > MaxFileBytes {
		return nil, &Error{File: file, Line: 1, Column: 1,
			Msg: fmt.Sprintf("file is %d bytes, over the limit of %d", len(src), MaxFileBytes)}
	}
	if e := checkText(file, src); e != nil {
		return nil, e
	}
	if _, e := prescan(file, src); e != nil {
		return nil, e
	}
	tokens := lexer.Tokenize(string(src))
	if e := checkTokens(file, len(src), tokens); e != nil {
		return nil, e
	}
	f, err := parser.Parse(tokens, 0)
	if err != nil {
		e := &Error{File: file, Line: 1, Column: 1, Msg: "not valid YAML: " + firstLine(err.Error())}
		if line, col, ok := yamlErrorPos(err.Error()); ok {
			e.Line, e.Column = line, col
		}
		return nil, e
	}
	return f, nil
}
