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
//	    limits: {memory: 2G, processes: 512, cpus: 1.5}
//	  publish:
//	    needs: [package]
//	    download: [{job: package, name: dist}]
//	    steps: [{run: ls dist}]
//
// Every error carries file:line:column and the field path, all errors are
// reported at once, and unknown keys are errors.
package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
)

// FileName is the pipeline file's name at the repository root.
const FileName = ".forgeci.yml"

// Limits of one pipeline.
const (
	// MaxFileBytes is the largest pipeline file. Real pipelines are a few
	// to a few tens of KiB; at 256 KiB any file parses in bounded time and
	// under 64 MB (see parseYAML and TestBoundedParse).
	MaxFileBytes = 256 << 10
	// MaxDepth is the deepest nesting of YAML collections. A pipeline
	// nests 6 deep (jobs.build.steps[0].env.NAME); go-yaml's work grows
	// with the square of the depth.
	MaxDepth = 32
	// MaxNodes is the most YAML tokens a file may hold: scalars, keys,
	// '-', ',', brackets and comments. A realistic 256 KiB pipeline has
	// 27,000; go-yaml keeps every token in memory before parsing.
	MaxNodes       = 50000
	MaxJobs        = 500
	MaxSteps       = 100
	MaxMatrix      = 256
	MaxTimeoutMins = 24 * 60
	DefaultTimeout = 60
	MaxRetries     = 5
	// MaxJobName bounds a job's name with its matrix values, in
	// characters (the database's bound).
	MaxJobName = 200
	// MaxJobSpecBytes and MaxRunSpecBytes bound the job specs of a run,
	// as JSON (what the store keeps and each claim sends): one job's, and
	// all of a run's together.
	MaxJobSpecBytes = 256 << 10
	MaxRunSpecBytes = 4 << 20
	// MaxJobEnvBytes bounds a job's environment: the file's env merged
	// with the job's, and every step's env, names and values.
	MaxJobEnvBytes  = 64 << 10
	maxEnvVars      = 256 // in one env mapping, and in a job's merged env
	maxEnvValueSize = 32 << 10
)

// Job is one job after matrix expansion: a run's job as the store takes
// it (store.NewJob is the same type), so a parsed pipeline's jobs are the
// rows of a new run as they are.
type Job = domain.PlannedJob

// Pipeline is a parsed pipeline file.
type Pipeline struct {
	Name string
	Jobs []Job
	// Triggers are the file's on: (nil without one: every push and pull
	// request runs it).
	Triggers *Triggers
	// Concurrency is the file's concurrency (nil: none).
	Concurrency *domain.Concurrency
	// RunName is the file's run-name: a template over forgeci (github)
	// and inputs the control plane evaluates when it makes the run.
	RunName string
}

// Schedules are the pipeline's on.schedule entries (none without them).
func (pl *Pipeline) Schedules() []domain.Schedule {
	if pl.Triggers == nil || pl.Triggers.Schedules == nil {
		return []domain.Schedule{}
	}
	return pl.Triggers.Schedules
}

// WorkflowName is github.workflow: the pipeline's name, or its file's.
func (pl *Pipeline) WorkflowName() string {
	if pl.Name != "" {
		return pl.Name
	}
	return FileName
}

// Error is one problem, located.
type Error struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	Path   string `json:"path"` // e.g. jobs.build.steps[0].run
	Msg    string `json:"message"`
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

// Invalid is es as data: an invalid_request error whose message names the
// file and counts the problems, and whose details locate each.
func (es Errors) Invalid() *domain.Error {
	file := FileName
	details := make([]domain.Detail, len(es))
	for i, e := range es {
		details[i] = domain.Detail{File: e.File, Line: e.Line, Column: e.Column, Path: e.Path, Message: e.Msg}
		file = e.File
	}
	what := "1 problem"
	if len(es) != 1 {
		what = fmt.Sprintf("%d problems", len(es))
	}
	return &domain.Error{Code: domain.EInvalid, Message: fmt.Sprintf("%s is not valid: %s", file, what), Details: details}
}

// AsError returns err as a domain error: Errors become Invalid; anything
// else is returned unchanged.
func AsError(err error) error {
	var es Errors
	if errors.As(err, &es) {
		return es.Invalid()
	}
	return err
}

var (
	jobNameRE    = domain.LazyRegexp(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$`)
	envKeyRE     = domain.LazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
	secretNameRE = domain.LazyRegexp(`^[A-Z_][A-Z0-9_]{0,99}$`)
	// Compiled once: compiling it for each artifact cost a realistic
	// 256 KiB pipeline 30 MB.
	artifactNameRE = domain.LazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

type parseState struct {
	file string
	src  string // the file, to locate errors inside block scalars
	// lineStarts are the offsets of the file's lines, made on first use.
	lineStarts []int
	errs       Errors
	specLeft   int // bytes the job being expanded may still add (substitute)
	// matrixKeys are the keys of the matrix of the job being expanded;
	// strategyNow is its strategy context (fail-fast, job-index, job-total,
	// max-parallel), known when the job is made.
	matrixKeys  []string
	strategyNow map[string]any
	// nodes are the scalars holding ${{ }}, by path, to locate what
	// expand finds wrong in them.
	nodes map[string]ast.Node
	// readsNeeds: an expression of the job being expanded that the
	// runner evaluates reads needs.
	readsNeeds bool
	// runDefaults are the file's defaults.run.
	runDefaults runDefaults
	// idToken: the file's permissions give id-token: write.
	idToken bool
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
// On any problem it returns Errors holding all of them. Any file is read
// in time and memory that grow linearly with its size (parseYAML), and
// the job specs it makes are bounded (expand).
func Parse(file string, src []byte) (*Pipeline, error) {
	p := &parseState{file: file, src: string(src)}
	f, e := parseYAML(file, src)
	if e != nil {
		return nil, Errors{*e}
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
			if n := envBytes(globalEnv); n > MaxJobEnvBytes {
				p.errorf(kv.Value, "env", "is %d bytes: a job's environment is limited to %d", n, MaxJobEnvBytes)
				globalEnv = nil // said once, not again for every job
			}
		case "jobs":
			jobsNode = kv
		case "on":
			pl.Triggers = p.triggers(kv.Value, key)
		case "concurrency":
			pl.Concurrency = p.concurrency(kv.Value, key, groupContexts)
		case "run-name":
			pl.RunName = p.runName(kv.Value, key)
		case "defaults":
			p.runDefaults = p.defaults(kv.Value, key)
		case "permissions":
			p.idToken = p.permissions(kv.Value, key)
		default:
			p.errorf(kv.Key, key, "unknown key %q (expected name, run-name, on, concurrency, env, defaults, permissions or jobs)", key)
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
		// A problem in a matrix job's field is met once per combination.
		return nil, slices.Compact(p.errs)
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
	labelsNode ast.Node
	timeout    int
	env        map[string]string
	steps      []domain.Step
	artifacts  []domain.ArtifactSpec
	reports    *domain.ReportsSpec
	download   []domain.NeedArtifact
	dlNode     ast.Node
	cache      *domain.CacheSpec
	limits     *domain.JobLimits
	secrets    []string
	retryLost  int
	retryFail  int
	matrix     []map[string]string
	matrixKeys []string
	// Flow control (flow.go).
	ifExpr          string
	ifNode          ast.Node
	continueOnError bool
	continueTpl     string // continue-on-error: ${{ matrix.x }}
	outputs         map[string]string
	failFast        bool
	maxParallel     int
	displayName     string
	runDefaults     runDefaults
	concurrency     *domain.Concurrency
	environment     *domain.EnvironmentSpec
	idToken         *bool // the job's permissions (nil: the file's)
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
	if len(kvs) > MaxJobs {
		// Before each job copies the file's env.
		p.errorf(n, "jobs", "the pipeline has %d jobs, over the limit of %d", len(kvs), MaxJobs)
		return nil
	}
	var raws []*rawJob
	byName := map[string]*rawJob{}
	for _, kv := range kvs {
		name := keyOf(kv)
		path := "jobs." + name
		if !jobNameRE().MatchString(name) {
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
	p.checkCycles(raws)
	for _, j := range raws {
		p.checkJobIf(j)
	}
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
	return p.expand(raws)
}

func (p *parseState) job(name, path string, n ast.Node, globalEnv map[string]string) *rawJob {
	j := &rawJob{name: name, path: path, node: n, timeout: DefaultTimeout, failFast: true}
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
			j.labels, j.labelsNode = p.strList(kv.Value, kp), kv.Value
			for _, l := range j.labels {
				if !domain.ValidLabel(l) && !strings.Contains(l, "${{") {
					p.errorf(kv.Value, kp, "label %q must hold only letters, digits and . _ : / - (at most 64)", l)
				}
			}
		case "needs":
			j.needs, j.needsNode = p.strList(kv.Value, kp), kv.Value
		case "timeout-minutes":
			j.timeout = p.minutes(kv.Value, kp) / 60
		case "env":
			j.env = p.env(kv.Value, kp)
		case "steps":
			stepsNode = kv.Value
			j.steps = p.steps(kv.Value, kp)
		case "artifacts":
			j.artifacts = p.artifacts(kv.Value, kp)
		case "reports":
			j.reports = p.reports(kv.Value, kp)
		case "download":
			j.download, j.dlNode = p.downloads(kv.Value, kp), kv.Value
		case "cache":
			j.cache = p.cache(kv.Value, kp)
		case "retry":
			j.retryLost, j.retryFail = p.retry(kv.Value, kp)
		case "limits":
			j.limits = p.limits(kv.Value, kp)
		case "strategy":
			p.strategy(j, kv.Value, kp)
		case "secrets":
			j.secrets = p.strList(kv.Value, kp)
			for _, name := range j.secrets {
				if !secretNameRE().MatchString(name) {
					p.errorf(kv.Value, kp, "secret name %q must be upper-case letters, digits and _, not starting with a digit", name)
				}
			}
		default:
			if !p.flowKey(j, key, kv.Value, kp) {
				p.errorf(kv.Key, kp, "unknown key %q (expected name, runs-on, needs, if, timeout-minutes, env, defaults, permissions, environment, secrets, steps, outputs, artifacts, reports, download, cache, retry, limits, strategy or continue-on-error)", key)
			}
		}
	}
	if stepsNode == nil {
		p.errorf(n, path+".steps", "steps is required")
	}
	j.env = mergeEnv(globalEnv, j.env)
	p.checkJobEnv(j, n)
	if j.matrix == nil {
		j.matrix = []map[string]string{nil}
	}
	return j
}

// checkJobEnv bounds what a job's environment adds to its spec, before
// the spec is copied for each matrix combination.
func (p *parseState) checkJobEnv(j *rawJob, n ast.Node) {
	if len(j.env) > maxEnvVars {
		p.errorf(n, j.path+".env", "the job's environment (the file's env and its own) has %d variables, over the limit of %d", len(j.env), maxEnvVars)
	}
	size := envBytes(j.env)
	for _, st := range j.steps {
		size += envBytes(st.Env)
	}
	if size > MaxJobEnvBytes {
		p.errorf(n, j.path+".env", "the job's environment (the file's env, its own and its steps') is %d bytes, over the limit of %d", size, MaxJobEnvBytes)
	}
}

// envBytes is the size of an environment's names and values.
func envBytes(env map[string]string) int {
	n := 0
	for k, v := range env {
		n += len(k) + len(v)
	}
	return n
}
