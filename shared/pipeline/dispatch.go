package pipeline

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
)

// Dispatch is on.workflow_dispatch: the pipeline may be run by hand, with
// these inputs.
type Dispatch struct {
	Inputs []Input
}

// Input is one of workflow_dispatch's typed inputs.
type Input struct {
	Name, Description, Type string // Type: string, boolean, choice or number
	Required                bool
	Default                 *string
	Options                 []string
}

// maxInputs is GitHub's limit of a workflow_dispatch's inputs.
const maxInputs = 25

var inputNameRE = domain.LazyRegexp(`^[A-Za-z_][A-Za-z0-9_-]{0,99}$`)

func (p *parseState) dispatchTrigger(v ast.Node, path string) *Dispatch {
	d := &Dispatch{}
	p.options(v, path, "inputs", map[string]func(ast.Node, string){
		"inputs": func(v ast.Node, ip string) {
			kvs, ok := p.mapping(v, ip)
			if !ok {
				return
			}
			if len(kvs) > maxInputs {
				p.errorf(v, ip, "holds %d inputs, over the limit of %d", len(kvs), maxInputs)
				return
			}
			for _, kv := range kvs {
				d.Inputs = append(d.Inputs, p.input(kv, ip+"."+keyOf(kv)))
			}
		},
	})
	return d
}

// input reads one input: its type (string by default), whether it is
// required, its default (which must fit the type) and a choice's options.
func (p *parseState) input(kv *ast.MappingValueNode, path string) Input {
	in := Input{Name: keyOf(kv), Type: "string"}
	if !inputNameRE().MatchString(in.Name) {
		p.errorf(kv.Key, path, "input name %q must start with a letter or _ and hold letters, digits, _ and -", in.Name)
	}
	p.options(kv.Value, path, "description, type, required, default or options", map[string]func(ast.Node, string){
		"description": func(v ast.Node, kp string) { in.Description, _ = p.str(v, kp) },
		"type": func(v ast.Node, kp string) {
			in.Type, _ = p.str(v, kp)
			if !slices.Contains([]string{"string", "boolean", "choice", "number"}, in.Type) {
				p.errorf(v, kp, "type is string, boolean, choice or number")
			}
		},
		"required": func(v ast.Node, kp string) { in.Required = p.boolean(v, kp) },
		"default": func(v ast.Node, kp string) {
			if s, ok := p.str(v, kp); ok {
				in.Default = &s
			}
		},
		"options": func(v ast.Node, kp string) { in.Options = p.strList(v, kp) },
	})
	switch {
	case in.Type == "choice" && len(in.Options) == 0:
		p.errorf(kv.Value, path+".options", "a choice needs options")
	case in.Type != "choice" && in.Options != nil:
		p.errorf(kv.Value, path+".options", "only a choice has options")
	}
	if in.Default != nil {
		if v, err := in.value(*in.Default); err != nil {
			p.errorf(kv.Value, path+".default", "%v", err)
		} else if b, ok := v.(bool); ok {
			s := strconv.FormatBool(b) // True, FALSE: as the form shows it
			in.Default = &s
		}
	}
	return in
}

// value is text given for the input as its typed value.
func (in Input) value(s string) (any, error) {
	switch in.Type {
	case "boolean":
		switch strings.ToLower(s) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, fmt.Errorf("input %s is a boolean: true or false, not %q", in.Name, s)
	case "number":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("input %s is a number, not %q", in.Name, s)
		}
		return f, nil
	case "choice":
		if !slices.Contains(in.Options, s) {
			return nil, fmt.Errorf("input %s is one of %s, not %q", in.Name, strings.Join(in.Options, ", "), s)
		}
	}
	return s, nil
}

// Resolve checks the inputs given for a manual run against the pipeline's
// and returns every input's typed value (the inputs context): unknown
// names, missing required inputs and values of the wrong type are
// refused, all at once; an input not given takes its default (or "",
// false, 0).
func (d *Dispatch) Resolve(given map[string]string) (map[string]any, error) {
	out := map[string]any{}
	var problems []string
	known := map[string]bool{}
	for _, in := range d.Inputs {
		known[in.Name] = true
		s, ok := given[in.Name]
		switch {
		case !ok && in.Required && in.Default == nil:
			problems = append(problems, "input "+in.Name+" is required")
			continue
		case !ok && in.Default != nil:
			s = *in.Default
		case !ok:
			s = map[string]string{"boolean": "false", "number": "0", "choice": first(in.Options)}[in.Type]
		}
		v, err := in.value(s)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		out[in.Name] = v
	}
	var unknown []string
	for name := range given {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		problems = append(problems, "the pipeline has no input "+name)
	}
	if len(problems) > 0 {
		return nil, domain.Errorf(domain.EInvalid, "%s", strings.Join(problems, "; "))
	}
	return out, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// DispatchInputs is the inputs context of a manual run of the pipeline,
// or why it cannot be run by hand: a pipeline whose on: has no
// workflow_dispatch cannot; one without on: can, with no inputs.
func (t *Triggers) DispatchInputs(given map[string]string) (map[string]any, error) {
	switch {
	case t == nil:
		return (&Dispatch{}).Resolve(given)
	case t.Dispatch == nil:
		return nil, domain.Errorf(domain.EInvalid, "the pipeline's on: has no workflow_dispatch: it is not run by hand")
	}
	return t.Dispatch.Resolve(given)
}
