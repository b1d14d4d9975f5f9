package pipeline

import (
	"fmt"

	"github.com/goccy/go-yaml/token"
)

// Budgets of go-yaml's parser, checked on its lexer's tokens before it
// runs. Each counts some of the parser's own work and is allowed per byte
// of the file (counted as at least 32 KiB, so that a small file may do
// what one of 32 KiB may), so that no file costs much more than a
// realistic one of its size; a realistic pipeline uses a tenth of each or
// less (TestRealisticCosts):
const (
	// Every key and list item gets a copy of its path from the root
	// ($.jobs.build.steps[0].run): depth times key length per node. A
	// realistic pipeline copies 3 bytes per byte of the file.
	pathBytesPerByte = 32
	// A block mapping of k keys is parsed in k nested calls that each copy
	// the keys after them: k*(k-1)/2 copies. A pipeline of MaxJobs jobs
	// makes 125,000 in its jobs mapping, allowed from the smallest size.
	keyCopiesPerByte = 4
	// An empty value (a key or '-' with nothing after it) is inserted into
	// the parser's token list, moving every token after it. Realistic
	// pipelines have next to none.
	nullShiftsPerByte = 32
	minBudgetBytes    = 32 << 10
)

type levelKind int

const (
	flowSeq levelKind = iota
	flowMap
	flowPair // a key: value pair inside a flow sequence: [a: b]
	blockSeq
	blockMap
)

// level is one open collection.
type level struct {
	kind  levelKind
	col   int
	path  int // the length of its path
	entry int // the length of its current entry's path
	count int // items or keys so far
	colon bool
}

type tokenCheck struct {
	file      string
	size      int            // the file's bytes the budgets are counted for
	toks      []*token.Token // without comments, as the parser reads them
	stack     []level
	paths     int
	copies    int
	shifts    int
	documents int
}

// checkTokens refuses tokens that would make go-yaml's parser nest deeper
// than MaxDepth or spend more than the budgets above. It follows the
// parser's nesting: flow collections by their brackets, block collections
// by the column of their '-' or keys, as parseSequence and parseMap do.
func checkTokens(file string, size int, tks token.Tokens) *Error {
	if len(tks) > MaxNodes {
		return tokenError(file, tks[MaxNodes], "the file has more than %d YAML nodes (scalars, keys, '-', ',' and brackets)", MaxNodes)
	}
	c := &tokenCheck{file: file, size: max(size, minBudgetBytes)}
	for _, t := range tks {
		if t.Type == token.InvalidType {
			return nil // the parser refuses it before any other work
		}
		if t.Type != token.CommentType {
			c.toks = append(c.toks, t)
		}
	}
	for k, t := range c.toks {
		if err := c.token(k, t); err != nil {
			return err
		}
	}
	return nil
}

func (c *tokenCheck) token(k int, t *token.Token) *Error {
	var next *token.Token
	if k+1 < len(c.toks) {
		next = c.toks[k+1]
	}
	switch t.Type {
	case token.DocumentHeaderType, token.DocumentEndType:
		// go-yaml splits documents recursively, copying the tokens after
		// each marker; one document is all a pipeline may hold anyway.
		if c.documents++; c.documents > 2 {
			return tokenError(c.file, t, "the file must hold exactly one YAML document")
		}
		c.stack = c.stack[:0]
	case token.SequenceStartType, token.MappingStartType:
		kind := flowSeq
		if t.Type == token.MappingStartType {
			kind = flowMap
		}
		if err := c.push(t, kind, 0); err != nil {
			return err
		}
		if kind == flowSeq {
			c.item(t)
		}
	case token.SequenceEndType, token.MappingEndType:
		if top := c.top(); top != nil && top.kind == flowMap && !top.colon && k > 0 &&
			c.toks[k-1].Type != token.MappingStartType && c.toks[k-1].Type != token.CollectEntryType {
			c.null(k) // {a}: a key with no ':'
		}
		c.closeFlow()
	case token.CollectEntryType:
		c.entry(k)
	case token.SequenceEntryType:
		if err := c.dash(t, k, next); err != nil {
			return err
		}
	case token.MappingKeyType:
		return c.key(t, t.Position.Column, 0, k, nil)
	case token.MappingValueType:
		col, n := t.Position.Column, 0
		if k > 0 {
			col, n = c.toks[k-1].Position.Column, len(c.toks[k-1].Value)
		}
		return c.key(t, col, n, k, next)
	}
	return c.budgets(t)
}

// entry is a ',': the next item of a flow sequence, or the next pair of a
// flow mapping (the last one empty if it had no ':' or no value).
func (c *tokenCheck) entry(k int) {
	for len(c.stack) > 0 && c.top().kind != flowSeq && c.top().kind != flowMap {
		c.stack = c.stack[:len(c.stack)-1]
	}
	top := c.top()
	switch {
	case top == nil:
	case top.kind == flowSeq:
		c.item(c.toks[k])
	case !top.colon && k > 0 && c.toks[k-1].Type != token.CollectEntryType && c.toks[k-1].Type != token.MappingStartType:
		c.null(k)
	}
	if top != nil {
		top.colon = false
	}
}

func (c *tokenCheck) dash(t *token.Token, k int, next *token.Token) *Error {
	col := t.Position.Column
	c.popBlock(func(l level) bool { return l.col > col })
	if top := c.top(); top == nil || top.kind != blockSeq || top.col != col {
		if err := c.push(t, blockSeq, col); err != nil {
			return err
		}
	}
	c.item(t)
	if next != nil && next.Position.Column <= col {
		c.null(k + 1)
	}
	return nil
}

// key is a key (before ':', or after '?') in column col, n bytes long.
func (c *tokenCheck) key(t *token.Token, col, n, k int, next *token.Token) *Error {
	top := c.top()
	switch {
	case top != nil && top.kind == flowMap:
		top.colon = true
	case top != nil && (top.kind == flowSeq || top.kind == flowPair):
		if err := c.push(t, flowPair, col); err != nil {
			return err
		}
	default:
		c.popBlock(func(l level) bool { return l.col > col || (l.col == col && l.kind == blockSeq) })
		if top = c.top(); top != nil && top.kind == blockMap && top.col == col {
			c.copies += top.count
			top.count++
		} else if err := c.push(t, blockMap, col); err != nil {
			return err
		} else {
			c.top().count = 1
		}
	}
	top = c.top()
	top.entry = top.path + n + 3 // ".key", or "'key'" when quoted
	c.paths += 3 * top.entry     // go-yaml builds it twice, and the key once more
	at := t
	if t.Type == token.MappingValueType && k > 0 {
		at = c.toks[k-1] // point at the key
	}
	if t.Type == token.MappingValueType {
		flow := top.kind == flowMap || top.kind == flowPair
		switch {
		case next == nil:
		case flow && (next.Type == token.CollectEntryType || next.Type == token.MappingEndType || next.Type == token.SequenceEndType):
			c.null(k + 1)
		case !flow && (next.Position.Column < col || (next.Position.Column == col && next.Type != token.SequenceEntryType)):
			c.null(k + 1)
		}
	}
	return c.budgets(at)
}

// item is the next item of the sequence on top: go-yaml gives it a path.
func (c *tokenCheck) item(t *token.Token) {
	top := c.top()
	top.count++
	top.entry = top.path + 2 + len(fmt.Sprint(top.count))
	c.paths += top.entry
}

// null is an empty value go-yaml inserts before token k.
func (c *tokenCheck) null(k int) {
	c.shifts += len(c.toks) - k
}

func (c *tokenCheck) push(t *token.Token, kind levelKind, col int) *Error {
	path := 1 // "$"
	if top := c.top(); top != nil {
		path = top.entry
	}
	c.stack = append(c.stack, level{kind: kind, col: col, path: path, entry: path})
	if len(c.stack) > MaxDepth {
		return tokenError(c.file, t, "nesting is deeper than %d levels", MaxDepth)
	}
	return nil
}

func (c *tokenCheck) top() *level {
	if len(c.stack) == 0 {
		return nil
	}
	return &c.stack[len(c.stack)-1]
}

// popBlock closes the block collections on top that end before col.
func (c *tokenCheck) popBlock(ends func(level) bool) {
	for len(c.stack) > 0 {
		top := c.top()
		if (top.kind != blockSeq && top.kind != blockMap) || !ends(*top) {
			return
		}
		c.stack = c.stack[:len(c.stack)-1]
	}
}

// closeFlow closes the innermost flow collection and what is open in it.
func (c *tokenCheck) closeFlow() {
	for len(c.stack) > 0 {
		kind := c.top().kind
		c.stack = c.stack[:len(c.stack)-1]
		if kind == flowSeq || kind == flowMap {
			return
		}
	}
}

func (c *tokenCheck) budgets(t *token.Token) *Error {
	switch {
	case c.paths > pathBytesPerByte*c.size:
		return tokenError(c.file, t, "keys nest too deep or are too long: go-yaml would copy %d bytes of key paths, over %d for a file this size", c.paths, pathBytesPerByte*c.size)
	case c.copies > keyCopiesPerByte*c.size:
		return tokenError(c.file, t, "a block mapping has too many keys for a file this size: go-yaml's work grows with the square of their number (split it, or write it as a flow mapping {...})")
	case c.shifts > nullShiftsPerByte*c.size:
		return tokenError(c.file, t, "too many empty values (a key or '-' with nothing after it) for a file this size: go-yaml moves the rest of the file for each")
	}
	return nil
}

func tokenError(file string, t *token.Token, format string, args ...any) *Error {
	e := &Error{File: file, Line: 1, Column: 1, Msg: fmt.Sprintf(format, args...)}
	if t != nil && t.Position != nil {
		e.Line, e.Column = t.Position.Line, max(t.Position.Column, 1)
	}
	return e
}
