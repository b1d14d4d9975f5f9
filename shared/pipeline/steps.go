package pipeline

import (
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

var stepIDRE = domain.LazyRegexp(`^[A-Za-z_][A-Za-z0-9_-]{0,99}$`)

// shells are the named shells, as GitHub runs them; any other shell must
// be a command with {0} for the script file.
var shells = map[string][]string{
	"bash":   {"bash", "--noprofile", "--norc", "-eo", "pipefail", "{0}"},
	"sh":     {"sh", "-e", "{0}"},
	"python": {"python3", "{0}"},
}

func (p *parseState) step(sn ast.Node, sp string, kvs []*ast.MappingValueNode) domain.Step {
	var st domain.Step
	hasRun, usesOK := false, false
	var uses string
	var usesNode, with ast.Node
	var runOnly []*ast.MappingValueNode // shell and working-directory: for run steps
	for _, kv := range kvs {
		if k := keyOf(kv); k == "shell" || k == "working-directory" {
			runOnly = append(runOnly, kv)
		}
	}
	p.keys(kvs, sp, "name, run, uses, with, env, timeout-minutes, id, if, shell, working-directory or continue-on-error", map[string]func(ast.Node, string){
		"name": func(v ast.Node, kp string) { st.Name, _ = p.str(v, kp) },
		"run": func(v ast.Node, kp string) {
			st.Run, hasRun = p.str(v, kp)
			if hasRun && strings.TrimSpace(st.Run) == "" {
				p.errorf(v, kp, "run must not be empty")
			}
		},
		"env":               func(v ast.Node, kp string) { st.Env = p.env(v, kp) },
		"timeout-minutes":   func(v ast.Node, kp string) { st.TimeoutSeconds = p.minutes(v, kp) },
		"id":                func(v ast.Node, kp string) { st.ID = p.stepID(v, kp) },
		"if":                func(v ast.Node, kp string) { st.If = p.condition(v, kp, stepContexts) },
		"shell":             func(v ast.Node, kp string) { st.Shell = p.shell(v, kp) },
		"working-directory": func(v ast.Node, kp string) { st.WorkingDirectory = p.workDir(v, kp) },
		"continue-on-error": func(v ast.Node, kp string) { st.ContinueOnError = p.boolean(v, kp) },
		"uses":              func(v ast.Node, kp string) { uses, usesOK = p.str(v, kp); usesNode = v },
		"with":              func(v ast.Node, kp string) { with = v },
	})
	checkout, versioned := checkoutUses(uses)
	switch {
	case usesNode != nil && hasRun:
		p.errorf(usesNode, sp+".uses", "a step has run or uses, not both")
	case usesNode != nil && !usesOK: // str has said why
	case usesNode != nil && !checkout:
		p.errorf(usesNode, sp+".uses", "uses (actions) is not supported, except actions/checkout (the workspace is the run's snapshot): write the shell commands in run")
	case usesNode != nil && !versioned:
		p.errorf(usesNode, sp+".uses", "actions/checkout needs a version of letters, digits and . _ / -, as actions/checkout@v4")
	case usesNode != nil:
		p.checkoutStep(&st, sp, with, runOnly)
	case !hasRun:
		p.errorf(sn, sp+".run", "run is required")
	case with != nil:
		p.errorf(with, sp+".with", "with is for a uses step")
	}
	if st.Name == "" {
		st.Name = firstLine(strings.TrimSpace(st.Run))
	}
	return st
}

// checkoutStep makes a checkout step one that says there is nothing to
// fetch and gives GitHub's outputs (checkoutScript).
func (p *parseState) checkoutStep(st *domain.Step, sp string, with ast.Node, runOnly []*ast.MappingValueNode) {
	for _, kv := range runOnly {
		p.errorf(kv.Key, sp+"."+keyOf(kv), "%s is for a run step", keyOf(kv))
	}
	if with != nil {
		p.checkoutWith(with, sp+".with")
	}
	st.Run = checkoutScript
	if st.Name == "" {
		st.Name = "actions/checkout"
	}
}

func (p *parseState) minutes(v ast.Node, kp string) int {
	m, ok := p.integer(v, kp)
	if !ok {
		return 0
	}
	if m < 1 || m > MaxTimeoutMins {
		p.errorf(v, kp, "must be between 1 and %d", MaxTimeoutMins)
	}
	return m * 60
}

func (p *parseState) stepID(v ast.Node, kp string) string {
	id, ok := p.str(v, kp)
	if ok && !stepIDRE().MatchString(id) {
		p.errorf(v, kp, "a step id starts with a letter or _ and holds letters, digits, _ and -")
	}
	return id
}

func (p *parseState) boolean(v ast.Node, kp string) bool {
	if b, ok := unwrap(v).(*ast.BoolNode); ok {
		return b.Value
	}
	p.errorf(v, kp, "must be true or false")
	return false
}

// condition reads an if: an expression with or without ${{ }}, reading
// only the contexts its place has; it is kept as the expression's text.
func (p *parseState) condition(v ast.Node, kp string, contexts []string) string {
	s, ok := p.str(v, kp)
	if !ok {
		return ""
	}
	if p.nodes == nil {
		p.nodes = map[string]ast.Node{}
	}
	p.nodes[kp] = v
	src := strings.TrimSpace(s)
	if inner, ok := strings.CutPrefix(src, "${{"); ok && strings.HasSuffix(inner, "}}") && strings.Count(src, "${{") == 1 {
		src = strings.TrimSuffix(inner, "}}")
	} else if strings.Contains(src, "${{") {
		p.errorf(v, kp, "an if: is one expression: write it with or without ${{ }}, not mixed with text")
		return ""
	}
	e, err := expr.Parse(src)
	if err == nil {
		err = e.Allow(contexts...)
	}
	if err != nil {
		p.errorf(v, kp, "if: %s", err.Message)
		return ""
	}
	return strings.TrimSpace(src)
}

// shell reads shell: a name of shells, or a command holding {0}.
func (p *parseState) shell(v ast.Node, kp string) []string {
	s, ok := p.str(v, kp)
	if !ok {
		return nil
	}
	if argv, ok := shells[s]; ok {
		return argv
	}
	argv := strings.Fields(s)
	if !strings.Contains(s, "{0}") || len(argv) == 0 || strings.Contains(argv[0], "{0}") {
		p.errorf(v, kp, "shell is bash, sh, python, or a command with {0} for the script file (for example perl {0})")
		return nil
	}
	return argv
}
