package pipeline

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
)

// expand turns raw jobs into jobs, one per matrix combination, with
// ${{ matrix.* }} substituted and needs pointing at every expansion.
func (p *parseState) expand(raws []*rawJob, byName map[string]*rawJob) []Job {
	names := map[string][]string{}
	for _, j := range raws {
		for _, combo := range j.matrix {
			names[j.name] = append(names[j.name], expandedName(j, combo))
		}
	}
	var out []Job
	for _, j := range raws {
		for _, combo := range j.matrix {
			sub := func(s, path string) string { return p.substitute(j.node, path, s, combo, false) }
			// Only env values and run scripts may name secrets: the
			// control plane fills them in at claim time.
			subSecret := func(s, path string) string { return p.substitute(j.node, path, s, combo, true) }
			job := Job{Name: expandedName(j, combo), TimeoutSeconds: j.timeout * 60,
				RetryLeaseLost: j.retryLost, RetryFailed: j.retryFail}
			for _, n := range j.needs {
				job.Needs = append(job.Needs, names[n]...)
			}
			for _, l := range j.labels {
				job.Labels = append(job.Labels, sub(l, j.path+".runs-on"))
			}
			job.Spec.Env = map[string]string{}
			for k, v := range j.env {
				job.Spec.Env[k] = subSecret(v, j.path+".env."+k)
			}
			for k, v := range combo {
				job.Spec.Env["FORGECI_MATRIX_"+strings.ToUpper(k)] = v
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
			out = append(out, job)
		}
	}
	if len(out) > MaxJobs {
		p.errorf(nil, "jobs", "the pipeline expands to %d jobs, over the limit of %d", len(out), MaxJobs)
	}
	return out
}

func expandedName(j *rawJob, combo map[string]string) string {
	if len(combo) == 0 {
		return j.name
	}
	var vals []string
	for _, k := range j.matrixKeys {
		vals = append(vals, combo[k])
	}
	return j.name + " (" + strings.Join(vals, ", ") + ")"
}

// substitute replaces ${{ matrix.KEY }}. Where secrets are allowed,
// ${{ secrets.NAME }} is kept, written canonically, for the claim to fill
// in; any other expression is an error.
func (p *parseState) substitute(n ast.Node, path, s string, combo map[string]string, secrets bool) string {
	return exprRE.ReplaceAllStringFunc(s, func(m string) string {
		expr := strings.TrimSpace(exprRE.FindStringSubmatch(m)[1])
		if name, ok := strings.CutPrefix(expr, "secrets."); ok {
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
		key, ok := strings.CutPrefix(expr, "matrix.")
		if !ok {
			p.errorf(n, path, "unsupported expression %q: only ${{ matrix.<axis> }} and ${{ secrets.<NAME> }} are known", m)
			return m
		}
		v, ok := combo[key]
		if !ok {
			p.errorf(n, path, "matrix has no axis %q", key)
			return m
		}
		return v
	})
}
