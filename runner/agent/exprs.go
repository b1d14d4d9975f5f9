package agent

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
	"github.com/forgeci/forgeci/shared/mask"
)

// The runner evaluates the ${{ }} a job with the expressions feature
// leaves to it (docs/runner-protocol.md, "expressions"): the job's env
// when the job starts, its cache keys before the restore, a step's
// fields just before the step, its outputs when the steps end.

// exprContext is what an expression of the job reads at this point: the
// run's facts, the matrix, env, the steps so far, the needs, the runner.
func (j *job) exprContext(seq *sequence, env map[string]string) *expr.Context {
	spec := j.claim.Job
	facts := map[string]any{}
	if spec.Run != nil {
		if m, ok := expr.FromGo(spec.Run).(map[string]any); ok {
			facts = m
		}
	}
	facts["job"], facts["workspace"] = spec.Name, j.ws
	inputs, _ := facts["inputs"].(map[string]any)
	if inputs == nil {
		inputs = map[string]any{}
	}
	vars, _ := facts["vars"].(map[string]any)
	if vars == nil {
		vars = map[string]any{}
	}
	envVar := map[string]any{}
	for k, v := range env {
		envVar[k] = v
	}
	steps := map[string]any{}
	if seq != nil {
		steps = maps.Clone(seq.steps)
	}
	needs := map[string]any{}
	for name, r := range spec.NeedResults {
		outs := map[string]any{}
		for k, v := range r.Outputs {
			outs[k] = v
		}
		needs[name] = map[string]any{"result": r.Result, "outputs": outs}
	}
	tmp, owner := "", -1
	if j.box != nil {
		tmp, owner = j.box.TmpDir(), j.box.Owner()
	}
	runner := map[string]any{"os": runnerOS(), "arch": runnerArch(), "name": hostname(), "temp": tmp}
	c := &expr.Context{Vars: map[string]any{"forgeci": facts, "github": facts, "matrix": expr.Matrix(spec.Matrix),
		"env": envVar, "steps": steps, "needs": needs, "inputs": inputs, "vars": vars, "runner": runner,
		"job": map[string]any{"status": j.status(seq)}},
		HashFiles: func(patterns []string) (string, error) { return hashFiles(j.ctx, j.ws, owner, patterns) }}
	if seq != nil {
		c.Status = seq.status
	}
	return c
}

// expand evaluates the ${{ }} in s, in a job whose runner evaluates them;
// any other job's strings hold none (a secret's value included).
func (j *job) expand(s string, c *expr.Context) (string, error) {
	if !j.claim.Job.HasFeature(domain.FeatureExpressions) || !strings.Contains(s, "${{") {
		return s, nil
	}
	t, errs := expr.ParseTemplate(s)
	if len(errs) > 0 {
		return "", errs[0]
	}
	return t.Eval(c)
}

// expandEnv evaluates an env mapping's values.
func (j *job) expandEnv(env map[string]string, c *expr.Context) (map[string]string, error) {
	if env == nil {
		return nil, nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		x, err := j.expand(v, c)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

// resolveJob evaluates, when the job starts, its env (which reads no env)
// and then its cache keys.
func (j *job) resolveJob() error {
	spec := &j.claim.Job
	env, err := j.expandEnv(spec.Env, j.exprContext(nil, nil))
	if err != nil {
		return err
	}
	spec.Env = env
	if spec.DisplayName != "" {
		name, err := j.expand(spec.DisplayName, j.exprContext(nil, nil))
		if err != nil {
			return fmt.Errorf("name: %w", err)
		}
		fmt.Fprintf(j.logs, "==> job %s\n", name)
	}
	if spec.Cache == nil {
		return nil
	}
	c := j.exprContext(nil, spec.Env)
	cache := *spec.Cache
	if cache.Key, err = j.expand(cache.Key, c); err != nil {
		return fmt.Errorf("cache key: %w", err)
	}
	cache.RestoreKeys = nil
	for _, k := range spec.Cache.RestoreKeys {
		x, err := j.expand(k, c)
		if err != nil {
			return fmt.Errorf("cache restore key: %w", err)
		}
		cache.RestoreKeys = append(cache.RestoreKeys, x)
	}
	spec.Cache = &cache
	return nil
}

// resolveStep evaluates a step's name, env and script, just before it
// runs: env reads the job's env, the script the job's and the step's.
func (j *job) resolveStep(st domain.Step, seq *sequence) (domain.Step, error) {
	var err error
	c := j.exprContext(seq, j.jobEnv())
	if st.Name, err = j.expand(st.Name, c); err != nil {
		return st, fmt.Errorf("name: %w", err)
	}
	if st.Env, err = j.expandEnv(st.Env, c); err != nil {
		return st, err
	}
	c = j.exprContext(seq, mergeEnv(j.jobEnv(), st.Env))
	if st.Run, err = j.expand(st.Run, c); err != nil {
		return st, fmt.Errorf("run: %w", err)
	}
	return st, nil
}

// jobOutputs evaluates the job's outputs mapping when the steps end.
func (j *job) jobOutputs(seq *sequence) (map[string]string, error) {
	c := j.exprContext(seq, j.jobEnv())
	out := make(map[string]string, len(j.claim.Job.Outputs))
	for name, tpl := range j.claim.Job.Outputs {
		v, err := j.expand(tpl, c)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// dropSecretOutputs removes from outputs those that hold a secret the log
// masks (in any form it knows), as GitHub does, and names them: a job that
// needs one would get it without naming the secret, in clear in its log
// (its own mask has only its own secrets) and in the database.
func dropSecretOutputs(outputs map[string]string, set *mask.Set) []string {
	var dropped []string
	for name, v := range outputs {
		if set.String(v) != v {
			delete(outputs, name)
			dropped = append(dropped, name)
		}
	}
	slices.Sort(dropped)
	return dropped
}

func mergeEnv(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// runnerOS and runnerArch are runner.os and runner.arch as GitHub names
// them.
func runnerOS() string {
	switch runtime.GOOS {
	case "darwin":
		return "macOS"
	case "windows":
		return "Windows"
	}
	return "Linux"
}

func runnerArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "X64"
	case "arm64":
		return "ARM64"
	case "386":
		return "X86"
	case "arm":
		return "ARM"
	}
	return strings.ToUpper(runtime.GOARCH)
}

// status is job.status as the job stands: cancelled once it is stopped
// (a cancel, its timeout, its lease), failure once a step failed it, and
// success before, as GitHub's.
func (j *job) status(seq *sequence) string {
	switch {
	case j.ctx != nil && j.stopped() != nil:
		return "cancelled"
	case seq != nil && seq.failed:
		return "failure"
	}
	return "success"
}
