package expr

import (
	"fmt"
	"strings"

	"github.com/rhysd/actionlint"
)

// Error is a problem in an expression, at a byte offset of its source.
type Error struct {
	Offset  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Expr is one parsed expression (what stands between ${{ and }}).
type Expr struct {
	Source string
	root   actionlint.ExprNode
}

// MaxSource bounds one expression's source.
const MaxSource = 64 << 10

// Parse parses src, the text of one expression without ${{ }}.
func Parse(src string) (*Expr, *Error) {
	if len(src) > MaxSource {
		return nil, &Error{Message: fmt.Sprintf("an expression may be at most %d bytes", MaxSource)}
	}
	root, err := actionlint.NewExprParser().Parse(actionlint.NewExprLexer(src + "}}"))
	if err != nil {
		return nil, &Error{Offset: min(err.Offset, len(src)), Message: err.Message}
	}
	e := &Expr{Source: strings.TrimSpace(src), root: root}
	if perr := e.check(); perr != nil {
		return nil, perr
	}
	return e, nil
}

// functions are the functions an expression may call: their arity, the
// least and the most arguments (-1: any number).
var functions = map[string][2]int{
	"contains": {2, 2}, "startswith": {2, 2}, "endswith": {2, 2}, "format": {1, -1},
	"join": {1, 2}, "tojson": {1, 1}, "fromjson": {1, 1}, "hashfiles": {1, -1},
	"success": {0, 0}, "failure": {0, 0}, "always": {0, 0}, "cancelled": {0, 0},
}

// statusFunctions are the functions that decide whether a job or step
// runs after a failure or a cancel.
var statusFunctions = map[string]bool{"success": true, "failure": true, "always": true, "cancelled": true}

// check refuses unknown functions and wrong numbers of arguments.
func (e *Expr) check() *Error {
	var bad *Error
	actionlint.VisitExprNode(e.root, func(n, _ actionlint.ExprNode, entering bool) {
		call, ok := n.(*actionlint.FuncCallNode)
		if !entering || !ok || bad != nil {
			return
		}
		name := strings.ToLower(call.Callee)
		arity, known := functions[name]
		switch {
		case !known:
			bad = &Error{Offset: call.Token().Offset, Message: fmt.Sprintf("unknown function %s() (known: contains, startsWith, endsWith, format, join, toJSON, fromJSON, hashFiles, success, failure, always, cancelled)", call.Callee)}
		case len(call.Args) < arity[0] || arity[1] >= 0 && len(call.Args) > arity[1]:
			bad = &Error{Offset: call.Token().Offset, Message: fmt.Sprintf("%s() takes %s, not %d", call.Callee, arityText(arity), len(call.Args))}
		}
	})
	return bad
}

func arityText(a [2]int) string {
	switch {
	case a[0] == a[1] && a[0] == 1:
		return "1 argument"
	case a[0] == a[1]:
		return fmt.Sprintf("%d arguments", a[0])
	case a[1] < 0:
		return fmt.Sprintf("at least %d argument(s)", a[0])
	}
	return fmt.Sprintf("%d to %d arguments", a[0], a[1])
}

// CallsStatus reports whether the expression calls success(), failure(),
// always() or cancelled(): such a condition replaces the default rule that
// a job runs only when its needs passed.
func (e *Expr) CallsStatus() bool {
	found := false
	actionlint.VisitExprNode(e.root, func(n, _ actionlint.ExprNode, entering bool) {
		if call, ok := n.(*actionlint.FuncCallNode); ok && entering && statusFunctions[strings.ToLower(call.Callee)] {
			found = true
		}
	})
	return found
}

// Calls reports whether the expression calls function name.
func (e *Expr) Calls(name string) bool {
	found := false
	actionlint.VisitExprNode(e.root, func(n, _ actionlint.ExprNode, entering bool) {
		if call, ok := n.(*actionlint.FuncCallNode); ok && entering && strings.EqualFold(call.Callee, name) {
			found = true
		}
	})
	return found
}

// Contexts are the named contexts the expression reads (lower case), each
// with the offset of its first use.
func (e *Expr) Contexts() map[string]int {
	out := map[string]int{}
	actionlint.VisitExprNode(e.root, func(n, _ actionlint.ExprNode, entering bool) {
		if v, ok := n.(*actionlint.VariableNode); ok && entering {
			name := strings.ToLower(v.Name)
			if _, seen := out[name]; !seen {
				out[name] = v.Token().Offset
			}
		}
	})
	return out
}

// Allow refuses contexts the place of the expression does not have.
func (e *Expr) Allow(contexts ...string) *Error {
	for name, off := range e.Contexts() {
		ok := false
		for _, c := range contexts {
			ok = ok || name == c
		}
		if !ok {
			return &Error{Offset: off, Message: fmt.Sprintf("context %q is not available here (available: %s)", name, strings.Join(contexts, ", "))}
		}
	}
	return nil
}

// Properties are the properties of context ctx the expression names
// directly (ctx.NAME or ctx['NAME']), as written (the parser folds case),
// in order, without repeats.
func (e *Expr) Properties(ctx string) []string {
	toks, _, err := actionlint.LexExpression(e.Source + "}}")
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for i := 0; i+2 < len(toks); i++ {
		t := toks[i]
		if t.Kind != actionlint.TokenKindIdent || !strings.EqualFold(t.Value, ctx) || i > 0 && toks[i-1].Kind == actionlint.TokenKindDot {
			continue
		}
		name := ""
		switch next, prop := toks[i+1], toks[i+2]; {
		case next.Kind == actionlint.TokenKindDot && prop.Kind == actionlint.TokenKindIdent:
			name = prop.Value
		case next.Kind == actionlint.TokenKindLeftBracket && prop.Kind == actionlint.TokenKindString:
			name = strings.ReplaceAll(strings.Trim(prop.Value, "'"), "''", "'")
		}
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// Property reports whether the whole expression is ctx.NAME, and NAME as
// written.
func (e *Expr) Property(ctx string) (string, bool) {
	d, ok := e.root.(*actionlint.ObjectDerefNode)
	if !ok {
		return "", false
	}
	if v, ok := d.Receiver.(*actionlint.VariableNode); !ok || !strings.EqualFold(v.Name, ctx) {
		return "", false
	}
	if props := e.Properties(ctx); len(props) == 1 {
		return props[0], true
	}
	return "", false
}
