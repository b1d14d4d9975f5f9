package expr

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rhysd/actionlint"
)

func (ev *evaluator) call(n *actionlint.FuncCallNode) any {
	name := strings.ToLower(n.Callee)
	if statusFunctions[name] {
		return ev.status(name)
	}
	args := make([]any, len(n.Args))
	for i, a := range n.Args {
		args[i] = ev.value(a)
	}
	if ev.err != nil {
		return nil
	}
	var out any
	var err error
	switch name {
	case "contains":
		out = contains(args[0], args[1])
	case "startswith":
		out = strings.HasPrefix(strings.ToLower(ToString(args[0])), strings.ToLower(ToString(args[1])))
	case "endswith":
		out = strings.HasSuffix(strings.ToLower(ToString(args[0])), strings.ToLower(ToString(args[1])))
	case "format":
		out, err = format(ToString(args[0]), args[1:])
	case "join":
		out, err = join(args)
	case "tojson":
		out, err = toJSON(args[0])
	case "fromjson":
		s := ToString(args[0])
		// Decoding allocates tens of times its input: charge it so.
		if !ev.chargeUnits(n, 16*len(s)) {
			return nil
		}
		out, err = fromJSON(s)
	case "hashfiles":
		out, err = ev.hashFiles(args)
	default:
		err = fmt.Errorf("unknown function %s()", n.Callee)
	}
	if err != nil {
		return ev.fail(n, "%s(): %v", n.Callee, err)
	}
	return out
}

// status answers the status functions; without a Status the job or step
// runs after nothing that failed or was cancelled.
func (ev *evaluator) status(name string) bool {
	if ev.c.Status != nil {
		return ev.c.Status(name)
	}
	return name == "success" || name == "always"
}

func contains(search, item any) bool {
	if arr, ok := search.([]any); ok {
		for _, el := range arr {
			if looseEqual(el, item) {
				return true
			}
		}
		return false
	}
	return strings.Contains(strings.ToLower(ToString(search)), strings.ToLower(ToString(item)))
}

// format replaces {N} with argument N; {{ and }} stand for braces.
func format(f string, args []any) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case c == '{' && i+1 < len(f) && f[i+1] == '{':
			b.WriteByte('{')
			i++
		case c == '}' && i+1 < len(f) && f[i+1] == '}':
			b.WriteByte('}')
			i++
		case c == '{':
			end := strings.IndexByte(f[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("unclosed { at %d of the format string", i)
			}
			var k int
			if _, err := fmt.Sscanf(f[i+1:i+end], "%d", &k); err != nil || fmt.Sprint(k) != f[i+1:i+end] || k < 0 || k >= len(args) {
				return "", fmt.Errorf("{%s} names no argument (there are %d)", f[i+1:i+end], len(args))
			}
			b.WriteString(ToString(args[k]))
			i += end
		case c == '}':
			return "", fmt.Errorf("unmatched } at %d of the format string (write }} for a brace)", i)
		default:
			b.WriteByte(c)
		}
		if b.Len() > MaxResult {
			return "", fmt.Errorf("the result is over %d bytes", MaxResult)
		}
	}
	return b.String(), nil
}

func join(args []any) (string, error) {
	sep := ","
	if len(args) > 1 {
		sep = ToString(args[1])
	}
	arr, ok := args[0].([]any)
	if !ok {
		return ToString(args[0]), nil
	}
	var b strings.Builder
	for i, el := range arr {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(ToString(el))
		if b.Len() > MaxResult {
			return "", fmt.Errorf("the result is over %d bytes", MaxResult)
		}
	}
	return b.String(), nil
}

func toJSON(v any) (string, error) {
	// Refuse before building: an object of many large values would be
	// built whole, in the evaluating process, before its size is known.
	if jsonBound(v, 0) > MaxResult {
		return "", fmt.Errorf("the result is over %d bytes", MaxResult)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	if len(b) > MaxResult {
		return "", fmt.Errorf("the result is over %d bytes", MaxResult)
	}
	return string(b), nil
}

func fromJSON(s string) (any, error) {
	if len(s) > MaxResult {
		return nil, fmt.Errorf("the input is over %d bytes", MaxResult)
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	return v, nil
}

func (ev *evaluator) hashFiles(args []any) (string, error) {
	if ev.c.HashFiles == nil {
		return "", fmt.Errorf("hashFiles is only available in a job's steps")
	}
	patterns := make([]string, len(args))
	for i, a := range args {
		patterns[i] = ToString(a)
	}
	return ev.c.HashFiles(patterns)
}

// jsonBound is an upper bound of v's indented JSON size at depth, or
// MaxResult+1 as soon as it passes MaxResult.
func jsonBound(v any, depth int) int {
	indent := 2*depth + 4
	n := 0
	switch x := v.(type) {
	case string:
		return 6*len(x) + 2 // every byte escaped as \u00XX at worst
	case []any:
		for _, el := range x {
			if n += indent + jsonBound(el, depth+1); n > MaxResult {
				return MaxResult + 1
			}
		}
	case map[string]any:
		for k, el := range x {
			if n += indent + 6*len(k) + 4 + jsonBound(el, depth+1); n > MaxResult {
				return MaxResult + 1
			}
		}
	default:
		return 32
	}
	return n + indent
}
