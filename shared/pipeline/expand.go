package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"

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
			names[j.name] = append(names[j.name], expandedName(j, combo))
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
		for _, combo := range j.matrix {
			p.specLeft, p.matrixKeys = MaxJobSpecBytes, j.matrixKeys
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
	sub := func(s, path string) string { return p.substitute(j.node, path, s, combo, false) }
	// Only env values and run scripts may name secrets: the control plane
	// fills them in at claim time.
	subSecret := func(s, path string) string { return p.substitute(j.node, path, s, combo, true) }
	job := Job{Name: expandedName(j, combo), TimeoutSeconds: j.timeout * 60,
		RetryLeaseLost: j.retryLost, RetryFailed: j.retryFail}
	for _, n := range j.needs {
		job.Needs = append(job.Needs, names[n]...)
	}
	for _, l := range j.labels {
		job.Labels = append(job.Labels, sub(l, j.path+".runs-on"))
	}
	job.Spec.Limits = j.limits
	job.Spec.Env = map[string]string{}
	for k, v := range j.env {
		job.Spec.Env[k] = subSecret(v, j.path+".env."+k)
	}
	if len(j.matrixKeys) > 0 {
		job.Spec.Matrix = combo
	}
	for k, v := range combo {
		job.Spec.Env["FORGECI_MATRIX_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_"))] = v
	}
	for i, st := range j.steps {
		sp := fmt.Sprintf("%s.steps[%d]", j.path, i)
		// A name that shows a secret expression is never filled in.
		st.Name, st.Run = subSecret(st.Name, sp+".name"), subSecret(st.Run, sp+".run")
		if st.Env != nil {
			env := map[string]string{}
			for k, v := range st.Env {
				env[k] = subSecret(v, sp+".env."+k)
			}
			st.Env = env
		}
		job.Spec.Steps = append(job.Spec.Steps, st)
	}
	job.Spec.Artifacts = j.artifacts
	job.Spec.Secrets = j.secrets
	for _, d := range j.download {
		job.Spec.NeedArtifacts = append(job.Spec.NeedArtifacts, domain.NeedArtifact{Job: names[d.Job][0], Name: d.Name})
	}
	if j.cache != nil {
		c := *j.cache
		c.Key = sub(c.Key, j.path+".cache.key")
		c.RestoreKeys = nil
		for _, k := range j.cache.RestoreKeys {
			c.RestoreKeys = append(c.RestoreKeys, sub(k, j.path+".cache.restore-keys"))
		}
		job.Spec.Cache = &c
	}
	return job
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
// matrix (and literals), with this combination. Where secrets are allowed,
// ${{ secrets.NAME }} is kept, written canonically, for the claim to fill
// in; any other context is an error (checkExprs has already reported
// expressions that do not parse). A string without expressions is
// returned as is, shared by every job; one with expressions is built only
// while the job's spec budget (specLeft) lasts, since a long matrix value
// named many times could make it far longer than the file.
func (p *parseState) substitute(n ast.Node, path, s string, combo map[string]string, secrets bool) string {
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
			b.WriteString(p.expression(n, path, piece, combo, secrets))
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

// expression is the value of one ${{ }} of a job.
func (p *parseState) expression(n ast.Node, path string, piece expr.Piece, combo map[string]string, secrets bool) string {
	e, m := piece.Expr, strings.TrimSpace(piece.Text)
	if name, ok := e.Property("secrets"); ok {
		switch {
		case !secrets:
			p.errorf(n, path, "%s: secrets may be used only in env values and run scripts", m)
		case !secretNameRE.MatchString(name):
			p.errorf(n, path, "%s: secret names are upper-case letters, digits and _, not starting with a digit", m)
		default:
			return "${{ secrets." + name + " }}"
		}
		return m
	}
	if err := e.Allow("matrix"); err != nil {
		p.errorf(n, path, "unsupported expression %q: %s (a job's fields may read matrix, and env values and run scripts ${{ secrets.NAME }})", m, err.Message)
		return m
	}
	matrix := make(map[string]any, len(combo))
	for k, v := range combo {
		matrix[k] = v
	}
	for _, axis := range e.Properties("matrix") {
		if !hasAxis(p.matrixKeys, axis) {
			p.errorf(n, path, "%s: matrix has no axis %q", m, axis)
			return m
		}
	}
	v, err := e.Eval(&expr.Context{Vars: map[string]any{"matrix": matrix}})
	if err != nil {
		p.errorf(n, path, "%s: %v", m, err)
		return m
	}
	return expr.ToString(v)
}

// hasAxis reports whether the matrix has axis (an include entry may leave
// it out of some combinations: there it is null), ignoring case as
// expressions do.
func hasAxis(keys []string, axis string) bool {
	for _, k := range keys {
		if strings.EqualFold(k, axis) {
			return true
		}
	}
	return false
}
