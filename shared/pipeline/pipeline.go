// Package pipeline parses .forgeci.yml, ForgeCI's pipeline file, in a
// syntax a GitHub Actions user reads at once:
//
//	env: {GOFLAGS: -mod=readonly}
//	jobs:
//	  test:
//	    runs-on: [linux]
//	    strategy:
//	      matrix: {go: ["1.22", "1.23"]}
//	    steps:
//	      - name: Test
//	        run: go test ./...
//	  package:
//	    needs: [test]
//	    timeout-minutes: 10
//	    steps: [{run: make dist}]
//	    artifacts: [{name: dist, paths: [dist/]}]
//	    cache: {key: "go-${{ matrix.go }}", restore-keys: [go-], paths: [.cache]}
//	    retry: {lease-lost: 1, failed: 0}
//	  publish:
//	    needs: [package]
//	    download: [{job: package, name: dist}]
//	    steps: [{run: ls dist}]
//
// Every error carries file:line:column and the field path, all errors are
// reported at once, and unknown keys are errors.
package pipeline

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/forgeci/forgeci/shared/domain"
)

// FileName is the pipeline file's name at the repository root.
const FileName = ".forgeci.yml"

// Limits of one pipeline.
const (
	MaxFileBytes    = 1 << 20
	MaxJobs         = 500
	MaxSteps        = 100
	MaxMatrix       = 256
	MaxTimeoutMins  = 24 * 60
	DefaultTimeout  = 60
	MaxRetries      = 5
	maxEnvValueSize = 32 << 10
)

// Job is one job after matrix expansion.
type Job struct {
	Name           string
	Needs          []string
	Labels         []string
	TimeoutSeconds int
	RetryLeaseLost int
	RetryFailed    int
	Spec           domain.JobSpec
}

// Pipeline is a parsed pipeline file.
type Pipeline struct {
	Name string
	Jobs []Job
}

// Error is one problem, located.
type Error struct {
	File   string
	Line   int
	Column int
	Path   string // e.g. jobs.build.steps[0].run
	Msg    string
}

func (e Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Path, e.Msg)
}

// Errors is every problem found, in file order.
type Errors []Error

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

var (
	jobNameRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$`)
	envKeyRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	exprRE       = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)
	labelRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$`)
	secretNameRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,99}$`)
)

type parseState struct {
	file string
	errs Errors
}

func (p *parseState) errorf(n ast.Node, path, format string, args ...any) {
	e := Error{File: p.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	// A mapping's own token is the ':' of its first pair; point at the key.
	switch m := n.(type) {
	case *ast.MappingNode:
		if len(m.Values) > 0 && m.Values[0].Key != nil {
			n = m.Values[0].Key
		}
	case *ast.MappingValueNode:
		if m.Key != nil {
			n = m.Key
		}
	}
	if n != nil {
		if tok := n.GetToken(); tok != nil && tok.Position != nil {
			e.Line, e.Column = tok.Position.Line, tok.Position.Column
		}
	}
	if e.Line == 0 {
		e.Line, e.Column = 1, 1
	}
	p.errs = append(p.errs, e)
}

// Parse parses and validates a pipeline file. file names it in errors.
// On any problem it returns Errors holding all of them.
func Parse(file string, src []byte) (*Pipeline, error) {
	p := &parseState{file: file}
	if len(src) > MaxFileBytes {
		p.errorf(nil, "", "file is %d bytes, over the limit of %d", len(src), MaxFileBytes)
		return nil, p.errs
	}
	f, err := parser.ParseBytes(src, 0)
	if err != nil {
		e := Error{File: file, Line: 1, Column: 1, Msg: "not valid YAML: " + firstLine(err.Error())}
		if line, col, ok := yamlErrorPos(err.Error()); ok {
			e.Line, e.Column = line, col
		}
		return nil, Errors{e}
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		p.errorf(nil, "", "the file must hold exactly one YAML document with a jobs mapping")
		return nil, p.errs
	}
	root, ok := p.mapping(f.Docs[0].Body, "")
	if !ok {
		return nil, p.errs
	}
	pl := &Pipeline{}
	var globalEnv map[string]string
	var jobsNode *ast.MappingValueNode
	for _, kv := range root {
		switch key := keyOf(kv); key {
		case "name":
			pl.Name, _ = p.str(kv.Value, "name")
		case "env":
			globalEnv = p.env(kv.Value, "env")
		case "jobs":
			jobsNode = kv
		default:
			p.errorf(kv.Key, key, "unknown key %q (expected name, env or jobs)", key)
		}
	}
	if jobsNode == nil {
		p.errorf(f.Docs[0].Body, "jobs", "jobs is required")
		return nil, p.errs
	}
	pl.Jobs = p.jobs(jobsNode.Value, globalEnv)
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool {
			if p.errs[i].Line != p.errs[j].Line {
				return p.errs[i].Line < p.errs[j].Line
			}
			return p.errs[i].Column < p.errs[j].Column
		})
		return nil, p.errs
	}
	return pl, nil
}

// rawJob is a job before matrix expansion.
type rawJob struct {
	name, path string
	node       ast.Node
	needsNode  ast.Node
	needs      []string
	labels     []string
	timeout    int
	env        map[string]string
	steps      []domain.Step
	artifacts  []domain.ArtifactSpec
	download   []domain.NeedArtifact
	dlNode     ast.Node
	cache      *domain.CacheSpec
	secrets    []string
	retryLost  int
	retryFail  int
	matrix     []map[string]string
	matrixKeys []string
}

func (p *parseState) jobs(n ast.Node, globalEnv map[string]string) []Job {
	kvs, ok := p.mapping(n, "jobs")
	if !ok {
		return nil
	}
	if len(kvs) == 0 {
		p.errorf(n, "jobs", "at least one job is required")
		return nil
	}
	var raws []*rawJob
	byName := map[string]*rawJob{}
	for _, kv := range kvs {
		name := keyOf(kv)
		path := "jobs." + name
		if !jobNameRE.MatchString(name) {
			p.errorf(kv.Key, path, "job name %q must start with a letter, digit or _ and hold only letters, digits, _ . - (at most 100)", name)
			continue
		}
		if _, dup := byName[name]; dup {
			p.errorf(kv.Key, path, "job %q is defined twice", name)
			continue
		}
		j := p.job(name, path, kv.Value, globalEnv)
		raws = append(raws, j)
		byName[name] = j
	}
	// needs: known, and no cycles.
	for _, j := range raws {
		for _, need := range j.needs {
			if need == j.name {
				p.errorf(j.needsNode, j.path+".needs", "job %q needs itself", j.name)
			} else if byName[need] == nil {
				p.errorf(j.needsNode, j.path+".needs", "job %q needs unknown job %q", j.name, need)
			}
		}
	}
	p.checkCycles(raws, byName)
	// download: only from needed jobs, naming artifacts they declare.
	for _, j := range raws {
		for i, d := range j.download {
			path := fmt.Sprintf("%s.download[%d]", j.path, i)
			up := byName[d.Job]
			switch {
			case up == nil:
				p.errorf(j.dlNode, path, "unknown job %q", d.Job)
			case !contains(j.needs, d.Job):
				p.errorf(j.dlNode, path, "job %q is not in needs: artifacts come only from needed jobs", d.Job)
			case len(up.matrix) > 1:
				p.errorf(j.dlNode, path, "job %q is a matrix of %d jobs; its artifacts cannot be told apart", d.Job, len(up.matrix))
			case !hasArtifact(up.artifacts, d.Name):
				p.errorf(j.dlNode, path, "job %q declares no artifact %q", d.Job, d.Name)
			}
		}
	}
	if len(p.errs) > 0 {
		return nil
	}
	return p.expand(raws, byName)
}

func (p *parseState) job(name, path string, n ast.Node, globalEnv map[string]string) *rawJob {
	j := &rawJob{name: name, path: path, node: n, timeout: DefaultTimeout}
	kvs, ok := p.mapping(n, path)
	if !ok {
		return j
	}
	var stepsNode ast.Node
	for _, kv := range kvs {
		key := keyOf(kv)
		kp := path + "." + key
		switch key {
		case "runs-on":
			j.labels = p.strList(kv.Value, kp)
			for _, l := range j.labels {
				if !labelRE.MatchString(l) && !exprRE.MatchString(l) {
					p.errorf(kv.Value, kp, "label %q must hold only letters, digits and . _ : / - (at most 64)", l)
				}
			}
		case "needs":
			j.needs, j.needsNode = p.strList(kv.Value, kp), kv.Value
		case "timeout-minutes":
			if v, ok := p.integer(kv.Value, kp); ok {
				if v < 1 || v > MaxTimeoutMins {
					p.errorf(kv.Value, kp, "must be between 1 and %d", MaxTimeoutMins)
				}
				j.timeout = v
			}
		case "env":
			j.env = p.env(kv.Value, kp)
		case "steps":
			stepsNode = kv.Value
			j.steps = p.steps(kv.Value, kp)
		case "artifacts":
			j.artifacts = p.artifacts(kv.Value, kp)
		case "download":
			j.download, j.dlNode = p.downloads(kv.Value, kp), kv.Value
		case "cache":
			j.cache = p.cache(kv.Value, kp)
		case "retry":
			j.retryLost, j.retryFail = p.retry(kv.Value, kp)
		case "strategy":
			j.matrix, j.matrixKeys = p.strategy(kv.Value, kp)
		case "secrets":
			j.secrets = p.strList(kv.Value, kp)
			for _, name := range j.secrets {
				if !secretNameRE.MatchString(name) {
					p.errorf(kv.Value, kp, "secret name %q must be upper-case letters, digits and _, not starting with a digit", name)
				}
			}
		default:
			p.errorf(kv.Key, kp, "unknown key %q (expected runs-on, needs, timeout-minutes, env, secrets, steps, artifacts, download, cache, retry or strategy)", key)
		}
	}
	if stepsNode == nil {
		p.errorf(n, path+".steps", "steps is required")
	}
	j.env = mergeEnv(globalEnv, j.env)
	if j.matrix == nil {
		j.matrix = []map[string]string{nil}
	}
	return j
}

func (p *parseState) steps(n ast.Node, path string) []domain.Step {
	seq, ok := p.sequence(n, path)
	if !ok {
		return nil
	}
	if len(seq) == 0 {
		p.errorf(n, path, "at least one step is required")
	}
	if len(seq) > MaxSteps {
		p.errorf(n, path, "at most %d steps are allowed", MaxSteps)
	}
	var out []domain.Step
	for i, sn := range seq {
		sp := fmt.Sprintf("%s[%d]", path, i)
		kvs, ok := p.mapping(sn, sp)
		if !ok {
			continue
		}
		var st domain.Step
		hasRun := false
		for _, kv := range kvs {
			key := keyOf(kv)
			switch key {
			case "name":
				st.Name, _ = p.str(kv.Value, sp+".name")
			case "run":
				st.Run, hasRun = p.str(kv.Value, sp+".run")
				if hasRun && strings.TrimSpace(st.Run) == "" {
					p.errorf(kv.Value, sp+".run", "run must not be empty")
				}
			case "env":
				st.Env = p.env(kv.Value, sp+".env")
			case "timeout-minutes":
				if v, ok := p.integer(kv.Value, sp+".timeout-minutes"); ok {
					if v < 1 || v > MaxTimeoutMins {
						p.errorf(kv.Value, sp+".timeout-minutes", "must be between 1 and %d", MaxTimeoutMins)
					}
					st.TimeoutSeconds = v * 60
				}
			case "uses":
				p.errorf(kv.Key, sp+".uses", "uses (actions) is not supported: write the shell commands in run")
			default:
				p.errorf(kv.Key, sp+"."+key, "unknown key %q (expected name, run, env or timeout-minutes)", key)
			}
		}
		if !hasRun {
			p.errorf(sn, sp+".run", "run is required")
		}
		if st.Name == "" {
			st.Name = firstLine(strings.TrimSpace(st.Run))
		}
		out = append(out, st)
	}
	return out
}

func (p *parseState) artifacts(n ast.Node, path string) []domain.ArtifactSpec {
	seq, ok := p.sequence(n, path)
	if !ok {
		return nil
	}
	var out []domain.ArtifactSpec
	seen := map[string]bool{}
	for i, an := range seq {
		ap := fmt.Sprintf("%s[%d]", path, i)
		kvs, ok := p.mapping(an, ap)
		if !ok {
			continue
		}
		var a domain.ArtifactSpec
		for _, kv := range kvs {
			switch key := keyOf(kv); key {
			case "name":
				a.Name, _ = p.str(kv.Value, ap+".name")
			case "paths":
				a.Paths = p.relPaths(kv.Value, ap+".paths")
			default:
				p.errorf(kv.Key, ap+"."+key, "unknown key %q (expected name or paths)", key)
			}
		}
		if !regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`).MatchString(a.Name) {
			p.errorf(an, ap+".name", "artifact name %q must hold only letters, digits and . _ - (at most 128)", a.Name)
		}
		if seen[a.Name] {
			p.errorf(an, ap+".name", "artifact %q is declared twice", a.Name)
		}
		seen[a.Name] = true
		if len(a.Paths) == 0 {
			p.errorf(an, ap+".paths", "paths is required")
		}
		out = append(out, a)
	}
	return out
}

func (p *parseState) downloads(n ast.Node, path string) []domain.NeedArtifact {
	seq, ok := p.sequence(n, path)
	if !ok {
		return nil
	}
	var out []domain.NeedArtifact
	for i, dn := range seq {
		dp := fmt.Sprintf("%s[%d]", path, i)
		kvs, ok := p.mapping(dn, dp)
		if !ok {
			continue
		}
		var d domain.NeedArtifact
		for _, kv := range kvs {
			switch key := keyOf(kv); key {
			case "job":
				d.Job, _ = p.str(kv.Value, dp+".job")
			case "name":
				d.Name, _ = p.str(kv.Value, dp+".name")
			default:
				p.errorf(kv.Key, dp+"."+key, "unknown key %q (expected job or name)", key)
			}
		}
		if d.Job == "" || d.Name == "" {
			p.errorf(dn, dp, "job and name are required")
		}
		out = append(out, d)
	}
	return out
}

func (p *parseState) cache(n ast.Node, path string) *domain.CacheSpec {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil
	}
	c := &domain.CacheSpec{}
	for _, kv := range kvs {
		switch key := keyOf(kv); key {
		case "key":
			c.Key, _ = p.str(kv.Value, path+".key")
		case "restore-keys":
			c.RestoreKeys = p.strList(kv.Value, path+".restore-keys")
		case "paths":
			c.Paths = p.relPaths(kv.Value, path+".paths")
		default:
			p.errorf(kv.Key, path+"."+key, "unknown key %q (expected key, restore-keys or paths)", key)
		}
	}
	if c.Key == "" || len(c.Key) > 512 {
		p.errorf(n, path+".key", "key is required (at most 512 characters)")
	}
	if len(c.Paths) == 0 {
		p.errorf(n, path+".paths", "paths is required")
	}
	if len(c.RestoreKeys) > 15 {
		p.errorf(n, path+".restore-keys", "at most 15 restore keys are allowed")
	}
	return c
}

func (p *parseState) retry(n ast.Node, path string) (lost, failed int) {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return 0, 0
	}
	for _, kv := range kvs {
		key := keyOf(kv)
		v, ok := p.integer(kv.Value, path+"."+key)
		if ok && (v < 0 || v > MaxRetries) {
			p.errorf(kv.Value, path+"."+key, "must be between 0 and %d", MaxRetries)
		}
		switch key {
		case "lease-lost":
			lost = v
		case "failed":
			failed = v
		default:
			p.errorf(kv.Key, path+"."+key, "unknown key %q (expected lease-lost or failed)", key)
		}
	}
	return lost, failed
}

func (p *parseState) strategy(n ast.Node, path string) ([]map[string]string, []string) {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil, nil
	}
	var combos []map[string]string
	var keys []string
	for _, kv := range kvs {
		key := keyOf(kv)
		if key != "matrix" {
			p.errorf(kv.Key, path+"."+key, "unknown key %q (expected matrix)", key)
			continue
		}
		mp := path + ".matrix"
		axes, ok := p.mapping(kv.Value, mp)
		if !ok {
			continue
		}
		if len(axes) == 0 {
			p.errorf(kv.Value, mp, "a matrix needs at least one axis")
			continue
		}
		combos = []map[string]string{{}}
		for _, axis := range axes {
			name := keyOf(axis)
			ap := mp + "." + name
			if !envKeyRE.MatchString(name) {
				p.errorf(axis.Key, ap, "matrix axis %q must be an identifier", name)
			}
			values := p.strList(axis.Value, ap)
			if len(values) == 0 {
				p.errorf(axis.Value, ap, "a matrix axis needs at least one value")
				continue
			}
			dup := map[string]bool{}
			for _, v := range values {
				if dup[v] {
					p.errorf(axis.Value, ap, "value %q is listed twice", v)
				}
				dup[v] = true
			}
			keys = append(keys, name)
			var next []map[string]string
			for _, c := range combos {
				for _, v := range values {
					m := map[string]string{}
					for k, x := range c {
						m[k] = x
					}
					m[name] = v
					next = append(next, m)
				}
			}
			combos = next
			if len(combos) > MaxMatrix {
				p.errorf(kv.Value, mp, "the matrix expands to more than %d jobs", MaxMatrix)
				return nil, nil
			}
		}
	}
	return combos, keys
}

func (p *parseState) checkCycles(raws []*rawJob, byName map[string]*rawJob) {
	state := map[string]int{}
	var visit func(j *rawJob, stack []string) bool
	visit = func(j *rawJob, stack []string) bool {
		switch state[j.name] {
		case 1:
			p.errorf(j.needsNode, j.path+".needs", "needs form a cycle: %s", strings.Join(append(stack, j.name), " -> "))
			return false
		case 2:
			return true
		}
		state[j.name] = 1
		for _, n := range j.needs {
			if up := byName[n]; up != nil && up != j && !visit(up, append(stack, j.name)) {
				state[j.name] = 2
				return false
			}
		}
		state[j.name] = 2
		return true
	}
	for _, j := range raws {
		if state[j.name] == 0 {
			visit(j, nil)
		}
	}
}

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

// --- node helpers -------------------------------------------------------

func unwrap(n ast.Node) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.TagNode:
			n = v.Value
		case *ast.AnchorNode:
			n = v.Value
		default:
			return n
		}
	}
}

func (p *parseState) mapping(n ast.Node, path string) ([]*ast.MappingValueNode, bool) {
	switch v := unwrap(n).(type) {
	case *ast.MappingNode:
		seen := map[string]bool{}
		for _, kv := range v.Values {
			k := keyOf(kv)
			if seen[k] {
				p.errorf(kv.Key, join(path, k), "key %q is repeated", k)
			}
			seen[k] = true
		}
		return v.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{v}, true
	case *ast.NullNode:
		return nil, true
	}
	p.errorf(n, path, "must be a mapping, not %s", kindOf(n))
	return nil, false
}

func (p *parseState) sequence(n ast.Node, path string) ([]ast.Node, bool) {
	if v, ok := unwrap(n).(*ast.SequenceNode); ok {
		return v.Values, true
	}
	p.errorf(n, path, "must be a list, not %s", kindOf(n))
	return nil, false
}

func (p *parseState) str(n ast.Node, path string) (string, bool) {
	switch v := unwrap(n).(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		return v.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return v.GetToken().Value, true
	}
	p.errorf(n, path, "must be a string, not %s", kindOf(n))
	return "", false
}

func (p *parseState) integer(n ast.Node, path string) (int, bool) {
	if v, ok := unwrap(n).(*ast.IntegerNode); ok {
		i, err := strconv.Atoi(v.GetToken().Value)
		if err == nil {
			return i, true
		}
	}
	p.errorf(n, path, "must be an integer, not %s", kindOf(n))
	return 0, false
}

// strList accepts a string or a list of strings.
func (p *parseState) strList(n ast.Node, path string) []string {
	if _, ok := unwrap(n).(*ast.SequenceNode); !ok {
		if s, ok := p.str(n, path); ok {
			return []string{s}
		}
		return nil
	}
	seq, _ := p.sequence(n, path)
	var out []string
	for i, e := range seq {
		if s, ok := p.str(e, fmt.Sprintf("%s[%d]", path, i)); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *parseState) relPaths(n ast.Node, path string) []string {
	paths := p.strList(n, path)
	for _, s := range paths {
		c := strings.TrimSuffix(s, "/")
		if s == "" || strings.HasPrefix(s, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.Contains(c, "/../") {
			p.errorf(n, path, "path %q must be relative and inside the workspace", s)
		}
	}
	return paths
}

func (p *parseState) env(n ast.Node, path string) map[string]string {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil
	}
	env := map[string]string{}
	for _, kv := range kvs {
		k := keyOf(kv)
		if !envKeyRE.MatchString(k) {
			p.errorf(kv.Key, path+"."+k, "environment variable name %q must be an identifier", k)
		} else if strings.HasPrefix(k, "FORGECI_") {
			p.errorf(kv.Key, path+"."+k, "names starting with FORGECI_ are reserved")
		}
		if v, ok := p.str(kv.Value, path+"."+k); ok {
			if len(v) > maxEnvValueSize {
				p.errorf(kv.Value, path+"."+k, "value is over %d bytes", maxEnvValueSize)
			}
			env[k] = v
		}
	}
	return env
}

func keyOf(kv *ast.MappingValueNode) string {
	if kv.Key == nil {
		return ""
	}
	if s, ok := unwrap(kv.Key).(*ast.StringNode); ok {
		return s.Value
	}
	return kv.Key.GetToken().Value
}

func kindOf(n ast.Node) string {
	switch unwrap(n).(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode:
		return "an integer"
	case *ast.FloatNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.NullNode, nil:
		return "empty"
	}
	return "something else"
}

func mergeEnv(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func hasArtifact(as []domain.ArtifactSpec, name string) bool {
	for _, a := range as {
		if a.Name == name {
			return true
		}
	}
	return false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

var yamlPosRE = regexp.MustCompile(`\[(\d+):(\d+)\]`)

func yamlErrorPos(msg string) (int, int, bool) {
	m := yamlPosRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, 0, false
	}
	l, _ := strconv.Atoi(m[1])
	c, _ := strconv.Atoi(m[2])
	return l, c, true
}
