package expr

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/rhysd/actionlint"
)

// Context is what an expression can read: its named contexts (forgeci,
// github, env, matrix, steps, needs, inputs, secrets, ...), and how to
// answer the status functions and hashFiles where they are meaningful.
type Context struct {
	Vars map[string]any
	// Status answers success(), failure(), always() and cancelled(); nil
	// answers success() true and the others as GitHub does for a run
	// that has neither failed nor been cancelled.
	Status func(name string) bool
	// HashFiles hashes the files matching the patterns; nil refuses it.
	HashFiles func(patterns []string) (string, error)
	// Budget bounds the work of one evaluation (0: MaxWork); Eval sets
	// Work to what it used, so a caller can share a budget among many.
	Budget, Work int
}

// Eval evaluates the expression.
func (e *Expr) Eval(c *Context) (v any, err error) {
	ev := &evaluator{c: c, budget: MaxWork}
	if c.Budget > 0 && c.Budget < MaxWork {
		ev.budget = c.Budget
	}
	v = ev.value(e.root)
	c.Work = ev.work
	return v, ev.err
}

type evaluator struct {
	c   *Context
	err error
	// work counts what evaluation has done so far: a unit per node and
	// per byte or element a value holds; at MaxWork it stops. Bounding
	// each value is not enough: an expression can build many in turn
	// (fromJSON of a large output, a thousand times over).
	work, budget int
}

// MaxWork bounds the work of one evaluation (about a second).
const MaxWork = 64 << 20

// charge counts the work of v and reports whether the budget holds.
func (ev *evaluator) charge(n actionlint.ExprNode, v any) bool {
	units := 1
	switch x := v.(type) {
	case string:
		units += len(x)
	case []any:
		units += len(x)
	case filtered:
		units += len(x)
	case map[string]any:
		units += len(x)
	}
	return ev.chargeUnits(n, units)
}

// chargeUnits counts units of work and reports whether the budget holds.
func (ev *evaluator) chargeUnits(n actionlint.ExprNode, units int) bool {
	ev.work += units
	if ev.work > ev.budget {
		ev.fail(n, "the expression does too much work (over %d units)", ev.budget)
		return false
	}
	return true
}

func (ev *evaluator) fail(n actionlint.ExprNode, format string, args ...any) any {
	if ev.err == nil {
		ev.err = &Error{Offset: n.Token().Offset, Message: fmt.Sprintf(format, args...)}
	}
	return nil
}

// filtered is the result of .*: a property of it is that property of each
// element (github.event.commits.*.message), where a property of a plain
// array is null.
type filtered []any

// value evaluates n to a plain value.
func (ev *evaluator) value(n actionlint.ExprNode) any {
	v := ev.eval(n)
	if !ev.charge(n, v) {
		return nil
	}
	if f, ok := v.(filtered); ok {
		return []any(f)
	}
	return v
}

func (ev *evaluator) eval(n actionlint.ExprNode) any {
	if ev.err != nil {
		return nil
	}
	switch n := n.(type) {
	case *actionlint.NullNode:
		return nil
	case *actionlint.BoolNode:
		return n.Value
	case *actionlint.IntNode:
		return float64(n.Value)
	case *actionlint.FloatNode:
		return n.Value
	case *actionlint.StringNode:
		return n.Value
	case *actionlint.VariableNode:
		return lookup(ev.c.Vars, n.Name)
	case *actionlint.ObjectDerefNode:
		return deref(ev.eval(n.Receiver), n.Property)
	case *actionlint.ArrayDerefNode:
		return filter(ev.eval(n.Receiver))
	case *actionlint.IndexAccessNode:
		return index(ev.value(n.Operand), ev.value(n.Index))
	case *actionlint.NotOpNode:
		return !Truthy(ev.value(n.Operand))
	case *actionlint.CompareOpNode:
		return compareOp(n.Kind, ev.value(n.Left), ev.value(n.Right))
	case *actionlint.LogicalOpNode:
		// && and || answer an operand, not a boolean, as GitHub's do.
		left := ev.value(n.Left)
		if Truthy(left) == (n.Kind == actionlint.LogicalOpNodeKindOr) {
			return left
		}
		return ev.value(n.Right)
	case *actionlint.FuncCallNode:
		return ev.call(n)
	}
	return ev.fail(n, "unsupported expression")
}

// lookup finds a property of an object ignoring case, as GitHub does.
func lookup(m map[string]any, name string) any {
	if v, ok := m[name]; ok {
		return v
	}
	for k, v := range m {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

func deref(v any, prop string) any {
	switch x := v.(type) {
	case map[string]any:
		return lookup(x, prop)
	case filtered:
		// A property of a filtered array is that property of each element.
		out := filtered{}
		for _, el := range x {
			if m, ok := el.(map[string]any); ok {
				if p := lookup(m, prop); p != nil {
					out = append(out, p)
				}
			}
		}
		return out
	}
	return nil
}

// filter is .*: an object's values, or an array's elements.
func filter(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(filtered, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			out = append(out, x[k])
		}
		return out
	case []any:
		return filtered(x)
	case filtered:
		return x
	}
	return filtered{}
}

func index(v, i any) any {
	switch x := v.(type) {
	case map[string]any:
		if s, ok := i.(string); ok {
			return lookup(x, s)
		}
		return lookup(x, ToString(i))
	case []any:
		n := toNumber(i)
		if math.IsNaN(n) || n < 0 || n != math.Trunc(n) || int(n) >= len(x) {
			return nil
		}
		return x[int(n)]
	}
	return nil
}

func compareOp(kind actionlint.CompareOpNodeKind, a, b any) bool {
	switch kind {
	case actionlint.CompareOpNodeKindEq:
		return looseEqual(a, b)
	case actionlint.CompareOpNodeKindNotEq:
		return !looseEqual(a, b)
	}
	c, ok := compare(a, b)
	if !ok {
		return false
	}
	switch kind {
	case actionlint.CompareOpNodeKindLess:
		return c < 0
	case actionlint.CompareOpNodeKindLessEq:
		return c <= 0
	case actionlint.CompareOpNodeKindGreater:
		return c > 0
	}
	return c >= 0
}
