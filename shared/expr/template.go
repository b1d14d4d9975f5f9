package expr

import (
	"strings"

	"github.com/rhysd/actionlint"
)

// Template is a string with ${{ }} expressions in it.
type Template struct {
	parts []part
}

type part struct {
	text string
	expr *Expr
}

// ParseTemplate finds and parses every ${{ }} in s. It returns every
// problem, each at its byte offset in s.
func ParseTemplate(s string) (*Template, []*Error) {
	t := &Template{}
	var errs []*Error
	pos := 0
	for {
		i := strings.Index(s[pos:], "${{")
		if i < 0 {
			t.parts = append(t.parts, part{text: s[pos:]})
			return t, errs
		}
		start := pos + i
		t.parts = append(t.parts, part{text: s[pos:start]})
		body := s[start+3:]
		_, end, lerr := actionlint.LexExpression(body)
		if lerr != nil {
			errs = append(errs, &Error{Offset: start + 3 + min(lerr.Offset, len(body)), Message: lerr.Message})
			t.parts = append(t.parts, part{text: s[start:]})
			return t, errs
		}
		e, perr := Parse(body[:end-2])
		if perr != nil {
			errs = append(errs, &Error{Offset: start + 3 + perr.Offset, Message: perr.Message})
		}
		t.parts = append(t.parts, part{text: s[start : start+3+end], expr: e})
		pos = start + 3 + end
	}
}

// Exprs are the template's expressions, in order.
func (t *Template) Exprs() []*Expr {
	var out []*Expr
	for _, p := range t.parts {
		if p.expr != nil {
			out = append(out, p.expr)
		}
	}
	return out
}

// IsExpr reports whether the whole template is one expression: its value
// is then the expression's, not a string.
func (t *Template) IsExpr() bool {
	var n int
	for _, p := range t.parts {
		switch {
		case p.expr != nil:
			n++
		case strings.TrimSpace(p.text) != "":
			return false
		}
	}
	return n == 1
}

// Eval evaluates each expression and joins the pieces into a string.
func (t *Template) Eval(c *Context) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.expr == nil {
			b.WriteString(p.text)
			continue
		}
		v, err := p.expr.Eval(c)
		if err != nil {
			return "", err
		}
		b.WriteString(ToString(v))
		if b.Len() > MaxResult {
			return "", &Error{Message: "the expanded text is over 1 MiB"}
		}
	}
	return b.String(), nil
}

// Piece is a run of literal text, or one expression with its source text
// (${{ ... }}) and its offset in the template.
type Piece struct {
	Text   string
	Expr   *Expr
	Offset int
}

// Pieces are the template's parts in order.
func (t *Template) Pieces() []Piece {
	out := make([]Piece, 0, len(t.parts))
	off := 0
	for _, p := range t.parts {
		out = append(out, Piece{Text: p.text, Expr: p.expr, Offset: off})
		off += len(p.text)
	}
	return out
}
