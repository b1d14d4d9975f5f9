package pipeline

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/forgeci/forgeci/shared/expr"
)

// checkExprs parses every ${{ }} in s, the value of scalar n, and reports
// each problem where it stands in the file.
func (p *parseState) checkExprs(n ast.Node, path, s string) {
	if !strings.Contains(s, "${{") {
		return
	}
	if p.nodes == nil {
		p.nodes = map[string]ast.Node{}
	}
	p.nodes[path] = n
	_, errs := expr.ParseTemplate(s)
	for _, e := range errs {
		p.errorAtOffset(n, path, s, e.Offset, "expression: %s", e.Message)
	}
}

// errorAtOffset reports a problem at byte off of s, the value of scalar n:
// the line and column in the file where that byte stands (a quoted or
// plain scalar starts at its token; a block scalar's text on the line
// after its indicator, at the indentation of its line).
func (p *parseState) errorAtOffset(n ast.Node, path, s string, off int, format string, args ...any) {
	if n == nil {
		p.errorf(nil, path, format, args...)
		return
	}
	tok := unwrap(n).GetToken()
	if tok == nil || tok.Position == nil {
		p.errorf(n, path, format, args...)
		return
	}
	line, col := tok.Position.Line, tok.Position.Column
	nl := strings.LastIndexByte(s[:off], '\n')
	lines := strings.Count(s[:off], "\n")
	switch {
	case tok.Type == token.LiteralType || tok.Type == token.FoldedType:
		line += 1 + lines
		col = p.indentAt(line) + off - nl
	case lines > 0:
		line += lines
		col = p.indentAt(line) + off - nl
	case tok.Type == token.DoubleQuoteType || tok.Type == token.SingleQuoteType:
		col += 1 + off
	default:
		col += off
	}
	p.errs = append(p.errs, Error{File: p.file, Line: line, Column: col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// indentAt is the number of spaces that start line (1-based) of the file.
func (p *parseState) indentAt(line int) int {
	if p.lineStarts == nil {
		p.lineStarts = []int{0}
		for i := 0; i < len(p.src); i++ {
			if p.src[i] == '\n' {
				p.lineStarts = append(p.lineStarts, i+1)
			}
		}
	}
	if line < 1 || line > len(p.lineStarts) {
		return 0
	}
	rest := p.src[p.lineStarts[line-1]:]
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	return len(rest) - len(strings.TrimLeft(rest, " "))
}
