package pipeline

import (
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// Where each expression is evaluated, and what it may read there. The
// parser evaluates what reads only the matrix; the control plane a job's
// if: when its needs end; the runner everything else, just before it is
// used (docs/pipeline.md, "Expressions").
var (
	jobIfContexts = []string{"forgeci", "github", "needs", "inputs", "vars"}
	// jobGroupContexts are what a job's concurrency group reads: the
	// parser fills in the matrix, the control plane the rest when the
	// job's needs have ended.
	jobGroupContexts = []string{"forgeci", "github", "needs", "inputs", "vars", "matrix"}
	jobEnvContexts   = []string{"forgeci", "github", "matrix", "needs", "inputs", "vars"}
	cacheContexts    = []string{"forgeci", "github", "matrix", "needs", "inputs", "vars", "env", "runner"}
	// stepContexts are what a step's fields and if: read on the runner.
	stepContexts = []string{"forgeci", "github", "matrix", "env", "steps", "needs", "inputs", "vars", "runner", "job"}
)

// place says what a string's ${{ }} may read where it stands.
type place struct {
	// secrets: ${{ secrets.NAME }} is kept for the claim to fill in.
	secrets bool
	// runner are the contexts the runner has here; with none, every
	// expression must be evaluated now (it may read only matrix).
	runner []string
	// steps are the step ids steps.<id> may name here.
	steps []string
	// maskSecrets: ${{ secrets.NAME }} shows as *** (a step's name).
	maskSecrets bool
	// made are the contexts the control plane fills in when it makes
	// the run (runs-on: the run's facts, inputs, vars); an expression
	// reading only them and matrix is kept for it.
	made []string
}

// madeContexts are what runs-on may read: the control plane evaluates it
// when it makes the run, with the run's facts.
var madeContexts = []string{"forgeci", "github", "inputs", "vars", "matrix"}

// facts are the properties of forgeci (and github) a job has: the run's
// (domain.RunFacts), and the job's own, which its runner adds.
var facts = []string{"ref", "ref_name", "sha", "event_name", "actor", "repository", "run_id", "run_number",
	"workflow", "head_ref", "base_ref", "job", "workspace"}

// checkFacts refuses a forgeci.* or github.* property ForgeCI does not
// have, rather than let it read as "".
func checkFacts(e *expr.Expr) *expr.Error {
	for _, ctx := range []string{"forgeci", "github"} {
		for _, prop := range e.Properties(ctx) {
			if !containsFold(facts, prop) {
				return &expr.Error{Message: ctx + "." + prop + " is not available (there are " + strings.Join(facts, ", ") + ")"}
			}
		}
	}
	return nil
}

// flowKey reads the job keys of flow control; it reports whether key was
// one of them.
func (p *parseState) flowKey(j *rawJob, key string, v ast.Node, kp string) bool {
	switch key {
	case "if":
		j.ifExpr = p.condition(v, kp, jobIfContexts)
		j.ifNode = v
		if e, err := expr.Parse(j.ifExpr); j.ifExpr != "" && err == nil && e.Calls("hashFiles") {
			p.errorf(v, kp, "hashFiles is evaluated on the runner: a job's if: cannot call it (a step's if: can)")
		}
	case "continue-on-error":
		if s, ok := unwrap(v).(*ast.StringNode); ok && strings.Contains(s.Value, "${{") {
			j.continueTpl, _ = p.str(v, kp)
		} else {
			j.continueOnError = p.boolean(v, kp)
		}
	case "outputs":
		j.outputs = p.outputs(v, kp)
	case "name":
		j.displayName, _ = p.str(v, kp)
	case "defaults":
		j.runDefaults = p.defaults(v, kp)
	case "permissions":
		idToken := p.permissions(v, kp)
		j.idToken = &idToken
	case "environment":
		j.environment = p.environment(v, kp)
	case "concurrency":
		j.concurrency = p.concurrency(v, kp, jobGroupContexts)
	default:
		return false
	}
	return true
}

// outputs reads a job's outputs: a name for each template the runner
// evaluates when the steps end.
func (p *parseState) outputs(n ast.Node, path string) map[string]string {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil
	}
	if len(kvs) > domain.MaxJobOutputs {
		p.errorf(n, path, "holds %d outputs, over the limit of %d", len(kvs), domain.MaxJobOutputs)
		return nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		name, kp := keyOf(kv), path+"."+keyOf(kv)
		if !domain.OutputNameRE().MatchString(name) {
			p.errorf(kv.Key, kp, "output name %q must start with a letter or _ and hold letters, digits, _ and -", name)
		}
		if s, ok := p.str(kv.Value, kp); ok {
			out[name] = s
		}
	}
	return out
}

// checkJobIf checks what a job's if: names against the job: needs.<job>
// only for a job it needs.
func (p *parseState) checkJobIf(j *rawJob) {
	if j.ifExpr == "" {
		return
	}
	if e, err := expr.Parse(j.ifExpr); err == nil {
		if err := checkFacts(e); err != nil {
			p.errorf(j.ifNode, j.path+".if", "%s", err.Message)
		}
		for _, name := range e.Properties("needs") {
			if !containsFold(j.needs, name) {
				p.errorf(j.ifNode, j.path+".if", "needs.%s: job %q is not in this job's needs", name, name)
			}
		}
	}
}

// checkRefs checks the needs.<job> and steps.<id> an expression kept for
// the runner names: only a job in needs, only a step id the place has.
// It reports whether the expression reads needs.
func (p *parseState) checkRefs(n ast.Node, path, s string, off int, e *expr.Expr, j *rawJob, pl place) (readsNeeds, ok bool) {
	if err := checkFacts(e); err != nil {
		p.errorAtOffset(n, path, s, off, "%s", err.Message)
		return false, false
	}
	for _, name := range e.Properties("needs") {
		if !containsFold(j.needs, name) {
			p.errorAtOffset(n, path, s, off, "needs.%s: job %q is not in this job's needs", name, name)
			return false, false
		}
	}
	for _, id := range e.Properties("steps") {
		if !containsFold(pl.steps, id) {
			p.errorAtOffset(n, path, s, off, "steps.%s: no step before this one has id %q", id, id)
			return false, false
		}
	}
	for _, prop := range e.Properties("job") {
		if !strings.EqualFold(prop, "status") {
			p.errorAtOffset(n, path, s, off, "job.%s: the job context has status only (the job's name is forgeci.job)", prop)
			return false, false
		}
	}
	_, reads := e.Contexts()["needs"]
	return reads, true
}

// containsFold reports whether s holds v, ignoring case as expressions do.
func containsFold(s []string, v string) bool {
	for _, x := range s {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}
