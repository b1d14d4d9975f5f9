package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// expand turns raw jobs into jobs, one per matrix combination, with
// ${{ matrix.* }} substituted and needs pointing at every expansion. It
// stops at the first job whose spec (the JSON the store keeps and every
// claim sends) is over MaxJobSpecBytes, or that takes the run's total over
// MaxRunSpecBytes: without this, 0.96 MB of pipeline became 228 MiB of job
// specs, its env copied into each of 250 jobs.
func (p *parseState) expand(raws []*rawJob) []Job {
	names := map[string][]string{}
	count := 0
	for _, j := range raws {
		for _, combo := range j.matrix {
			name := expandedName(j, combo)
			// A job's name is printed on every page and terminal that
			// shows the run, and names the CLI's download directory.
			if !domain.PlainText(name) || utf8.RuneCountInString(name) > MaxJobName {
				p.errorf(j.node, j.path, "job %q: with its matrix values its name would be %q: a job's name is plain text "+
					"(no control characters) of at most %d characters", j.name, domain.Truncate(name, 300), MaxJobName)
				return nil
			}
			names[j.name] = append(names[j.name], name)
		}
		count += len(j.matrix)
	}
	if count > MaxJobs {
		p.errorf(nil, "jobs", "the pipeline expands to %d jobs, over the limit of %d", count, MaxJobs)
		return nil
	}
	var out []Job
	total := 0
	for _, j := range raws {
		for index, combo := range j.matrix {
			p.specLeft, p.matrixKeys = MaxJobSpecBytes, j.matrixKeys
			p.strategyNow = strategyContext(j, index)
			job := p.expandJob(j, combo, names)
			// A JobSpec holds only strings, lists and maps of strings:
			// Marshal cannot fail.
			spec, _ := json.Marshal(job.Spec)
			if p.specLeft < 0 || len(spec) > MaxJobSpecBytes {
				p.errorf(j.node, j.path, "job %q: its spec is over %d bytes of JSON, the limit of one job", job.Name, MaxJobSpecBytes)
				return nil
			}
			if total += len(spec); total > MaxRunSpecBytes {
				p.errorf(j.node, j.path, "job %q: the run's job specs reach %d bytes of JSON here, over the limit of %d for a run", job.Name, total, MaxRunSpecBytes)
				return nil
			}
			out = append(out, job)
		}
	}
	return out
}

func (p *parseState) expandJob(j *rawJob, combo map[string]string, names map[string][]string) Job {
	p.readsNeeds = false
	job := Job{Name: expandedName(j, combo), TimeoutSeconds: j.timeout * 60,
		RetryLeaseLost: j.retryLost, RetryFailed: j.retryFail, Group: j.name, If: j.ifExpr,
		FailFast: j.failFast, MaxParallel: j.maxParallel}
	for _, n := range j.needs {
		job.Needs = append(job.Needs, names[n]...)
	}
	for _, l := range j.labels {
		job.Labels = append(job.Labels, p.substitute(j, j.path+".runs-on", l, combo, place{made: madeContexts}))
	}
	// As the store would: the labels the file fixes (a matrix's values
	// in), each valid and none twice; those the run fills in (vars,
	// inputs) are checked when it is made.
	fixed := slices.DeleteFunc(slices.Clone(job.Labels), func(l string) bool { return strings.Contains(l, "${{") })
	if err := domain.ValidateLabels(fixed); err != nil {
		var de *domain.Error
		if errors.As(err, &de) {
			p.errorf(j.labelsNode, j.path+".runs-on", "job %q: %s", job.Name, de.Message)
		}
	}
	job.Spec.Limits = j.limits
	job.Spec.Env = map[string]string{}
	// Only env values and run scripts may name secrets: the control plane
	// fills them in at claim time.
	for k, v := range j.env {
		job.Spec.Env[k] = p.substitute(j, j.path+".env."+k, v, combo, place{secrets: true, runner: jobEnvContexts})
	}
	if len(j.matrixKeys) > 0 {
		job.Spec.Matrix = combo
	}
	for k, v := range combo {
		job.Spec.Env["FORGECI_MATRIX_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_"))] = runnerSafe(v, place{runner: jobEnvContexts})
	}
	job.Spec.Steps = p.expandSteps(j, combo)
	job.Spec.Artifacts = j.artifacts
	job.Spec.Reports = j.reports
	job.Spec.Secrets = j.secrets
	for _, d := range j.download {
		job.Spec.NeedArtifacts = append(job.Spec.NeedArtifacts, domain.NeedArtifact{Job: names[d.Job][0], Name: d.Name})
	}
	if j.cache != nil {
		c := *j.cache
		at := place{runner: cacheContexts}
		c.Key = p.substitute(j, j.path+".cache.key", c.Key, combo, at)
		c.RestoreKeys = nil
		for _, k := range j.cache.RestoreKeys {
			c.RestoreKeys = append(c.RestoreKeys, p.substitute(j, j.path+".cache.restore-keys", k, combo, at))
		}
		job.Spec.Cache = &c
	}
	if j.displayName != "" {
		job.Spec.DisplayName = p.substitute(j, j.path+".name", j.displayName, combo, place{runner: jobEnvContexts})
	}
	p.expandFlow(j, &job, combo)
	p.expandEnvironment(j, &job, combo)
	job.Spec.IDToken = p.idToken
	if j.idToken != nil {
		// A job's permissions replace the file's, as GitHub's.
		job.Spec.IDToken = *j.idToken
	}
	return job
}

// expandSteps substitutes what the parser can in each step, and checks
// what it leaves for the runner: a step reads the outputs of the steps
// before it.
func (p *parseState) expandSteps(j *rawJob, combo map[string]string) []domain.Step {
	var out []domain.Step
	var ids []string
	defaults := p.runDefaults.over(j.runDefaults)
	for i, st := range j.steps {
		sp := fmt.Sprintf("%s.steps[%d]", j.path, i)
		// defaults.run is for run steps, as GitHub's: a checkout step's
		// script is for the runner's shell, in the workspace.
		if st.Shell == nil && !isCheckoutStep(st) {
			st.Shell = defaults.shell
		}
		if st.WorkingDirectory == "" && !isCheckoutStep(st) {
			st.WorkingDirectory = defaults.dir
		}
		at := place{secrets: true, runner: stepContexts, steps: ids}
		// A name that shows a secret expression is never filled in.
		st.Name = p.substitute(j, sp+".name", st.Name, combo, place{runner: stepContexts, steps: ids, maskSecrets: true})
		st.Run = p.substitute(j, sp+".run", st.Run, combo, at)
		if st.Env != nil {
			env := map[string]string{}
			for k, v := range st.Env {
				env[k] = p.substitute(j, sp+".env."+k, v, combo, at)
			}
			st.Env = env
		}
		if st.If != "" {
			p.checkCondition(j, sp+".if", st.If, place{runner: stepContexts, steps: ids})
		}
		if st.ID != "" {
			ids = append(ids, st.ID)
		}
		out = append(out, st)
	}
	return out
}

// expandFlow fills in the job's outputs mapping, its continue-on-error for
// this combination, and whether the runner's expressions read needs.
func (p *parseState) expandFlow(j *rawJob, job *Job, combo map[string]string) {
	var ids []string
	for _, st := range j.steps {
		if st.ID != "" {
			ids = append(ids, st.ID)
		}
	}
	if len(j.outputs) > 0 {
		job.Spec.Outputs = map[string]string{}
		for name, v := range j.outputs {
			kp := j.path + ".outputs." + name
			job.Spec.Outputs[name] = p.substitute(j, kp, v, combo, place{runner: stepContexts, steps: ids})
		}
	}
	job.ContinueOnError = j.continueOnError
	if j.continueTpl != "" {
		v := p.substitute(j, j.path+".continue-on-error", j.continueTpl, combo, place{})
		job.ContinueOnError = v == "true"
		if v != "true" && v != "false" && !strings.Contains(v, "${{") {
			p.errorf(p.nodes[j.path+".continue-on-error"], j.path+".continue-on-error", "is %q here: it must be true or false", v)
		}
	}
	job.ReadsNeeds = p.readsNeeds
	if c := j.concurrency; c != nil && c.Group != "" {
		// The control plane evaluates the rest: what it reads of needs
		// is not the runner's.
		reads := p.readsNeeds
		at := place{runner: jobGroupContexts}
		job.Concurrency = &domain.Concurrency{Group: p.substitute(j, j.path+".concurrency.group", c.Group, combo, at),
			CancelInProgress: c.CancelInProgress}
		if c.CancelExpr != "" {
			job.Concurrency.CancelExpr = p.substitute(j, j.path+".concurrency.cancel-in-progress", c.CancelExpr, combo, at)
		}
		p.readsNeeds = reads
	}
}

// checkCondition checks what a step's if: names (its syntax and contexts
// were checked where it was read).
func (p *parseState) checkCondition(j *rawJob, path, cond string, pl place) {
	e, err := expr.Parse(cond)
	if err != nil {
		return
	}
	if reads, ok := p.checkRefs(p.nodes[path], path, cond, 0, e, j, pl); ok && reads {
		p.readsNeeds = true
	}
}

func expandedName(j *rawJob, combo map[string]string) string {
	if len(combo) == 0 {
		return j.name
	}
	var vals []string
	for _, k := range j.matrixKeys {
		if v, ok := combo[k]; ok {
			vals = append(vals, v)
		}
	}
	return j.name + " (" + strings.Join(vals, ", ") + ")"
}

// substitute evaluates the ${{ }} expressions of s that read only the
// matrix (and literals), with this combination. An expression that reads
// a context the runner has at this place (pl.runner) is kept, written
// canonically, for the runner to evaluate; where secrets are allowed,
// ${{ secrets.NAME }} is kept for the claim to fill in; anything else is
// an error (checkExprs has already reported expressions that do not
// parse). A string without expressions is returned as is, shared by every
// job; one with expressions is built only while the job's spec budget
// (specLeft) lasts, since a long matrix value named many times could make
// it far longer than the file.
func (p *parseState) substitute(j *rawJob, path, s string, combo map[string]string, pl place) string {
	if !strings.Contains(s, "${{") {
		return s
	}
	tpl, errs := expr.ParseTemplate(s)
	if len(errs) > 0 {
		return s
	}
	var b strings.Builder
	for _, piece := range tpl.Pieces() {
		if piece.Expr == nil {
			b.WriteString(piece.Text)
		} else {
			b.WriteString(p.expression(j, path, s, piece, combo, pl))
		}
		if b.Len() > p.specLeft {
			break
		}
	}
	p.specLeft -= b.Len()
	if p.specLeft < 0 {
		return ""
	}
	return b.String()
}

// expression is the value of one ${{ }} of a job, or the expression
// itself when the claim or the runner fills it in.
func (p *parseState) expression(j *rawJob, path, s string, piece expr.Piece, combo map[string]string, pl place) string {
	e, m := piece.Expr, strings.TrimSpace(piece.Text)
	n := p.nodes[path]
	fail := func(format string, args ...any) string {
		p.errorAtOffset(n, path, s, piece.Offset, "%s: "+format, append([]any{m}, args...)...)
		return m
	}
	for _, axis := range e.Properties("matrix") {
		if !containsFold(p.matrixKeys, axis) { // an include entry may leave it out of some combinations: there it is null
			return fail("matrix has no axis %q", axis)
		}
	}
	if name, ok := e.Property("secrets"); ok {
		switch {
		case pl.maskSecrets:
			return "***"
		case !pl.secrets:
			return fail("secrets may be used only in env values and run scripts")
		case !secretNameRE().MatchString(name):
			return fail("secret names are upper-case letters, digits and _, not starting with a digit")
		}
		return "${{ secrets." + name + " }}"
	}
	for _, prop := range e.Properties("strategy") {
		if !containsFold(strategyProperties, prop) {
			return fail("strategy has no property %q (it has %s)", prop, strings.Join(strategyProperties, ", "))
		}
	}
	if e.Allow("matrix", "strategy") == nil && !e.Calls("hashFiles") {
		v, err := e.Eval(&expr.Context{Vars: map[string]any{"matrix": expr.Matrix(combo), "strategy": p.strategyNow}})
		if err != nil {
			return fail("%v", err)
		}
		text := expr.ToString(v)
		if strings.IndexByte(text, 0) >= 0 {
			// The run's rows are JSON in PostgreSQL, which holds no NUL.
			return fail("evaluates to text with a NUL byte")
		}
		return runnerSafe(text, pl)
	}
	if _, ok := e.Contexts()["secrets"]; ok && pl.secrets {
		return fail("a secret is used alone, as ${{ secrets.NAME }}")
	}
	if _, ok := e.Contexts()["strategy"]; ok {
		return fail("strategy is filled in when the job is made: an expression that reads it may read only matrix and strategy")
	}
	if len(pl.made) > 0 {
		if err := e.Allow(pl.made...); err != nil || e.Calls("hashFiles") {
			return fail("only %s can be read here", strings.Join(pl.made, ", "))
		}
		if err := checkFacts(e); err != nil {
			return fail("%s", err.Message)
		}
		return "${{ " + e.Source + " }}"
	}
	if len(pl.runner) == 0 {
		return fail("only matrix can be read here")
	}
	if err := e.Allow(pl.runner...); err != nil {
		return fail("%s (here: %s)", err.Message, strings.Join(pl.runner, ", "))
	}
	if e.Calls("hashFiles") && slices.Equal(pl.runner, jobEnvContexts) {
		return fail("hashFiles is evaluated in a job's steps, not its env")
	}
	reads, ok := p.checkRefs(n, path, s, piece.Offset, e, j, pl)
	if !ok {
		return m
	}
	p.readsNeeds = p.readsNeeds || reads
	return "${{ " + e.Source + " }}"
}

// runnerSafe is a value the parser computed, as it goes into text the
// runner evaluates (pl.runner): a value holding ${{ goes in as a string
// literal, so that the runner puts it back as it is rather than evaluate
// it a second time.
func runnerSafe(v string, pl place) string {
	if len(pl.runner) == 0 && len(pl.made) == 0 || !strings.Contains(v, "${{") {
		return v
	}
	return domain.Literal(v)
}

// strategyProperties are the strategy context's, as GitHub's.
var strategyProperties = []string{"fail-fast", "job-index", "job-total", "max-parallel"}

// strategyContext is the strategy context of a job's combination index:
// max-parallel is the number of combinations when the pipeline sets none.
func strategyContext(j *rawJob, index int) map[string]any {
	maxParallel := j.maxParallel
	if maxParallel == 0 {
		maxParallel = len(j.matrix)
	}
	return map[string]any{"fail-fast": j.failFast, "job-index": float64(index), "job-total": float64(len(j.matrix)),
		"max-parallel": float64(maxParallel)}
}
