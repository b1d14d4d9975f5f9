// Package expr evaluates ${{ }} expressions as GitHub Actions does. The
// lexer and parser are actionlint's (github.com/rhysd/actionlint), which
// follow GitHub's grammar and locate their errors; this package checks a
// parsed expression (known functions, their arity, the contexts a place
// allows) and evaluates it with GitHub's loose equality, truthiness and
// casts.
//
// Values are JSON's: nil, bool, float64, string, []any and map[string]any.
package expr

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// MaxResult bounds every string, array and object an expression builds
// (format, join, toJSON, fromJSON): nested calls could otherwise double a
// value at each level.
const MaxResult = 1 << 20

// Truthy is GitHub's truthiness: false, 0, -0, NaN, "" and null are false;
// everything else, arrays and objects included, is true.
func Truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0 && !math.IsNaN(x)
	case string:
		return x != ""
	}
	return true
}

// toNumber is GitHub's cast to a number: null 0, booleans 1 and 0, a
// string parsed as a number ("" is 0, anything else unparsable NaN),
// arrays and objects NaN.
func toNumber(v any) float64 {
	switch x := v.(type) {
	case nil:
		return 0
	case bool:
		if x {
			return 1
		}
		return 0
	case float64:
		return x
	case string:
		s := strings.TrimSpace(x)
		if s == "" {
			return 0
		}
		if n, ok := parseNumber(s); ok {
			return n
		}
	}
	return math.NaN()
}

// parseNumber reads decimal, exponent and 0x hexadecimal numbers.
func parseNumber(s string) (float64, bool) {
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		n, err := strconv.ParseUint(h, 16, 64)
		return float64(n), err == nil
	}
	if strings.ContainsAny(s, "_") || strings.EqualFold(s, "nan") || strings.Contains(strings.ToLower(s), "inf") {
		return 0, false
	}
	n, err := strconv.ParseFloat(s, 64)
	return n, err == nil
}

// ToString is GitHub's cast to a string: null "", booleans "true" and
// "false", numbers in their shortest decimal form, arrays "Array" and
// objects "Object".
func ToString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case bool:
		return strconv.FormatBool(x)
	case float64:
		switch {
		case math.IsNaN(x):
			return "NaN"
		case math.IsInf(x, 1):
			return "Infinity"
		case math.IsInf(x, -1):
			return "-Infinity"
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		return x
	case []any:
		return "Array"
	}
	return "Object"
}

// looseEqual is ==: values of one type compare directly (strings ignoring
// case, arrays and objects only as the same instance); values of two
// types compare as numbers.
func looseEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		if b == nil {
			return true
		}
	case bool:
		if y, ok := b.(bool); ok {
			return x == y
		}
	case float64:
		if y, ok := b.(float64); ok {
			return x == y
		}
	case string:
		if y, ok := b.(string); ok {
			return strings.EqualFold(x, y)
		}
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && len(x) > 0 && &x[0] == &y[0]
	case map[string]any:
		y, ok := b.(map[string]any)
		return ok && reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	if isComposite(b) {
		return false
	}
	return toNumber(a) == toNumber(b)
}

func isComposite(v any) bool {
	switch v.(type) {
	case []any, map[string]any:
		return true
	}
	return false
}

// compare orders a and b for < <= > >=: two strings ignoring case, else
// as numbers; ok is false when either is NaN (every comparison is false).
func compare(a, b any) (c int, ok bool) {
	if x, isStr := a.(string); isStr {
		if y, isStr := b.(string); isStr {
			return strings.Compare(strings.ToLower(x), strings.ToLower(y)), true
		}
	}
	if isComposite(a) || isComposite(b) {
		return 0, false
	}
	x, y := toNumber(a), toNumber(b)
	switch {
	case math.IsNaN(x) || math.IsNaN(y):
		return 0, false
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, true
}

// FromGo converts a Go value (strings, numbers, maps and slices of them)
// into an expression value through JSON.
func FromGo(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

// Matrix is the matrix context of a combination. A combination keeps
// each value as text; true and false become booleans again, so that
// continue-on-error: ${{ matrix.experimental }} and
// matrix.experimental == true mean what they mean in GitHub's workflows
// (other values stay strings: "1.20" must not become 1.2).
func Matrix(combo map[string]string) map[string]any {
	out := make(map[string]any, len(combo))
	for k, v := range combo {
		switch v {
		case "true":
			out[k] = true
		case "false":
			out[k] = false
		default:
			out[k] = v
		}
	}
	return out
}
