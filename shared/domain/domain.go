package domain

import (
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Job states (DESIGN.md "Job states").
const (
	JobPending  = "PENDING"
	JobQueued   = "QUEUED"
	JobRunning  = "RUNNING"
	JobPassed   = "PASSED"
	JobFailed   = "FAILED"
	JobCanceled = "CANCELED"
	JobAborted  = "ABORTED"
	JobSkipped  = "SKIPPED"
)

// Run states. A run's state is derived from its jobs.
const (
	RunPending  = "PENDING"
	RunRunning  = "RUNNING"
	RunPassed   = "PASSED"
	RunFailed   = "FAILED"
	RunCanceled = "CANCELED"
	RunAborted  = "ABORTED"
)

// Reasons recorded on jobs and attempts.
const (
	ReasonLeaseExpired = "lease_expired"
	ReasonNeedFailed   = "need_not_passed"
	ReasonExitCode     = "exit_code"
	ReasonCanceled     = "canceled"
)

// Outcome is what a runner reports when an attempt ends.
type Outcome string

// Outcomes a runner may report.
const (
	OutcomePassed   Outcome = "passed"
	OutcomeFailed   Outcome = "failed"
	OutcomeCanceled Outcome = "canceled"
)

// JobTerminal reports whether a job in state s will never change again.
func JobTerminal(s string) bool {
	switch s {
	case JobPassed, JobFailed, JobCanceled, JobAborted, JobSkipped:
		return true
	}
	return false
}

// Lease is the tuple that proves current ownership of a job. It travels in
// field "lease" of every job-scoped runner request.
type Lease struct {
	RunID      string `json:"run_id"`
	JobID      string `json:"job_id"`
	RunnerID   string `json:"runner_id"`
	LeaseID    string `json:"lease_id"`
	Generation int    `json:"generation"`
	// ExpiresAt is informative only (set in responses); the server decides
	// expiry with its own clock.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Validate checks that every field of the tuple is present. It says nothing
// about whether the lease is current; only the store can say that.
func (l *Lease) Validate() error {
	switch {
	case l == nil:
		return Errorf(EInvalid, "field lease is required")
	case l.RunID == "":
		return Errorf(EInvalid, "field lease.run_id is required")
	case l.JobID == "":
		return Errorf(EInvalid, "field lease.job_id is required")
	case l.RunnerID == "":
		return Errorf(EInvalid, "field lease.runner_id is required")
	case l.LeaseID == "":
		return Errorf(EInvalid, "field lease.lease_id is required")
	case l.Generation <= 0 || l.Generation > math.MaxInt32:
		return Errorf(EInvalid, "field lease.generation must be an integer from 1 to %d", math.MaxInt32)
	case len(l.RunID) > 100 || len(l.JobID) > 100 || len(l.RunnerID) > 100 || len(l.LeaseID) > 100:
		return Errorf(EInvalid, "lease fields must be at most 100 characters")
	}
	return nil
}

// Step is one shell step of a job.
type Step struct {
	Name           string            `json:"name"`
	Run            string            `json:"run"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	// The keys below need a runner that declares FeatureSteps.

	// ID names the step for steps.<id>.outputs and .outcome.
	ID string `json:"id,omitempty"`
	// If is an expression (without ${{ }}) the runner evaluates before the
	// step; empty means success().
	If string `json:"if,omitempty"`
	// Shell is how the script runs: an argv with {0} for the script file
	// (empty: bash -e {0}, as GitHub's default).
	Shell []string `json:"shell,omitempty"`
	// WorkingDirectory is relative to the workspace.
	WorkingDirectory string `json:"working_directory,omitempty"`
	// ContinueOnError: the step's failure does not fail the job.
	ContinueOnError bool `json:"continue_on_error,omitempty"`
}

// hasExpressions reports whether a ${{ }} other than ${{ secrets.NAME }}
// is left for the runner: in the strings that may hold secrets, step
// names, cache keys or outputs.
func (s JobSpec) hasExpressions() bool {
	found := false
	look := func(v string) {
		if strings.Contains(v, "${{") && strings.Contains(SecretRefRE().ReplaceAllString(v, ""), "${{") {
			found = true
		}
	}
	c := s.clone()
	c.strings(func(p *string) { look(*p) })
	for _, st := range s.Steps {
		look(st.Name)
	}
	look(s.DisplayName)
	if s.Cache != nil {
		look(s.Cache.Key)
		for _, k := range s.Cache.RestoreKeys {
			look(k)
		}
	}
	return found || len(s.Outputs) > 0
}

// HasFeature reports whether the claimed job needs feature f.
func (j ClaimedJob) HasFeature(f string) bool { return slices.Contains(j.Features, f) }

// ArtifactSpec names files a job uploads when it ends.
type ArtifactSpec struct {
	Name  string   `json:"name"`
	Paths []string `json:"paths"`
}

// CacheSpec is a job's cache: restored before the steps, saved on success.
type CacheSpec struct {
	Key         string   `json:"key"`
	RestoreKeys []string `json:"restore_keys,omitempty"`
	Paths       []string `json:"paths"`
}

// ReportsSpec names a job's test reports: workspace globs (** allowed)
// of JUnit XML files.
type ReportsSpec struct {
	JUnit []string `json:"junit"`
}

// ReportArtifact is the artifact a job's test report files are kept as.
const ReportArtifact = "test-reports"

// NeedArtifact is an artifact of a needed job that this job downloads.
type NeedArtifact struct {
	Job  string `json:"job"`
	Name string `json:"name"`
}

// JobSpec is what a runner executes; stored as the job's spec and sent in
// the claim response.
type JobSpec struct {
	Steps         []Step            `json:"steps"`
	Env           map[string]string `json:"env,omitempty"`
	Artifacts     []ArtifactSpec    `json:"artifacts,omitempty"`
	Cache         *CacheSpec        `json:"cache,omitempty"`
	NeedArtifacts []NeedArtifact    `json:"need_artifacts,omitempty"`
	// Secrets names project secrets the job gets as environment variables
	// of the same names (secrets: [DEPLOY_TOKEN]); ${{ secrets.NAME }} in
	// env values and run scripts names them too. The control plane fills
	// them in at claim time, for trusted runs only.
	Secrets []string `json:"secrets,omitempty"`
	// Limits the job asks its runner to hold it to.
	Limits *JobLimits `json:"limits,omitempty"`
	// Matrix is the job's matrix combination, for expressions the runner
	// evaluates (matrix.<axis>).
	Matrix map[string]string `json:"matrix,omitempty"`
	// Run is what the job's expressions read as forgeci.* (and github.*);
	// the store fills it in when it makes the run.
	Run *RunFacts `json:"run,omitempty"`
	// Outputs maps each job output to the template the runner evaluates
	// when the steps end (steps.<id>.outputs.<name>, ...).
	Outputs map[string]string `json:"outputs,omitempty"`
	// DisplayName is the job's name: as the pipeline names it (name:),
	// shown at the top of its log; jobs are known by their ids.
	DisplayName string `json:"display_name,omitempty"`
	// Reports are the job's test reports: files the runner reads when the
	// steps end (passed or not), uploads as the artifact ReportArtifact
	// and sums up.
	Reports *ReportsSpec `json:"reports,omitempty"`
	// NeedResults is the needs context (needs.<job>.result and .outputs),
	// filled in by the control plane when the job is queued, for a job
	// whose expressions read it.
	NeedResults map[string]NeedResult `json:"need_results,omitempty"`
	// Environment is the environment the job deploys to (environment:),
	// as templates the control plane evaluates when the job's needs end:
	// its rules (reviewers, branches) gate the job, and its secrets are
	// the job's.
	Environment *EnvironmentSpec `json:"environment,omitempty"`
	// IDToken: the job may ask for identity tokens bound to its lease
	// (permissions: {id-token: write}).
	IDToken bool `json:"id_token,omitempty"`
}

// EnvironmentSpec is a job's environment: name and URL, templates over
// the contexts a job's concurrency group reads.
type EnvironmentSpec struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
}

// EnvironmentNameRE is an environment's name once evaluated: lower case
// (GitHub's names are case-insensitive, so "Production" must not escape
// the rules of "production"), and never a ':' (it is a field of an
// identity token's sub).
var EnvironmentNameRE = LazyRegexp(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// NeedResult is one needed job as needs.<job> shows it: its result
// (success, failure, cancelled or skipped) and its outputs.
type NeedResult struct {
	Result  string            `json:"result"`
	Outputs map[string]string `json:"outputs"`
}

// RunFacts are a run's facts as expressions read them (forgeci.ref, ...).
type RunFacts struct {
	Ref        string `json:"ref"`
	RefName    string `json:"ref_name"`
	SHA        string `json:"sha"`
	EventName  string `json:"event_name"`
	Actor      string `json:"actor"`
	Repository string `json:"repository"`
	RunID      string `json:"run_id"`
	RunNumber  int64  `json:"run_number"`
	// Workflow is the pipeline's name (or its file's); HeadRef and
	// BaseRef a pull request's branches (empty otherwise).
	Workflow string `json:"workflow"`
	HeadRef  string `json:"head_ref"`
	BaseRef  string `json:"base_ref"`
	// Inputs are a manual run's inputs, typed (the inputs context).
	Inputs map[string]any `json:"inputs,omitempty"`
	// Vars are the project's variables the run was made with (the vars
	// context).
	Vars map[string]string `json:"vars,omitempty"`
}

// Concurrency is a pipeline's concurrency: its group (a template the
// control plane evaluates when it makes the run) and whether a new run
// cancels the group's run in progress.
type Concurrency struct {
	Group            string `json:"group"`
	CancelInProgress bool   `json:"cancel_in_progress,omitempty"`
	// CancelExpr is cancel-in-progress as one ${{ }} expression (then
	// CancelInProgress is not read), evaluated where the group is.
	CancelExpr string `json:"cancel_expr,omitempty"`
}

// ClaimedJob is the "job" object of a claim response.
type ClaimedJob struct {
	ID             string   `json:"id"`
	RunID          string   `json:"run_id"`
	Name           string   `json:"name"`
	Needs          []string `json:"needs"`
	TimeoutSeconds int      `json:"timeout_seconds"`
	// Features are the runner features the job needs (JobSpec.Features).
	Features []string `json:"features,omitempty"`
	JobSpec
}

// Source identifies the immutable snapshot a run executes.
type Source struct {
	BlobDigest     string `json:"blob_digest"`
	ManifestDigest string `json:"manifest_digest"`
	Size           int64  `json:"size"`
}

// SecretRefRE matches ${{ secrets.NAME }}, the one expression a job spec
// keeps until claim time.
var SecretRefRE = LazyRegexp(`\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// strings visits every string of the spec that may hold ${{ secrets.NAME }}:
// env values and step scripts.
func (s *JobSpec) strings(visit func(*string)) {
	for k, v := range s.Env {
		visit(&v)
		s.Env[k] = v
	}
	for i := range s.Steps {
		visit(&s.Steps[i].Run)
		for k, v := range s.Steps[i].Env {
			visit(&v)
			s.Steps[i].Env[k] = v
		}
	}
}

// clone copies what strings may write.
func (s JobSpec) clone() JobSpec {
	c := s
	c.Env = cloneEnv(s.Env)
	c.Steps = make([]Step, len(s.Steps))
	for i, st := range s.Steps {
		c.Steps[i] = st
		c.Steps[i].Env = cloneEnv(st.Env)
	}
	return c
}

// SecretNames returns the secrets the job uses, sorted.
func (s JobSpec) SecretNames() []string {
	names := append([]string{}, s.Secrets...)
	c := s.clone()
	c.strings(func(p *string) {
		for _, m := range SecretRefRE().FindAllStringSubmatch(*p, -1) {
			names = append(names, m[1])
		}
	})
	slices.Sort(names)
	return slices.Compact(names)
}

// ExpandSecrets replaces every ${{ secrets.NAME }} with its value in values
// ("" when absent, as GitHub does for a run without secrets) and returns
// the values it put in. In a job whose runner evaluates expressions
// (quote), each value goes in as a string literal expression, so that the
// runner puts back the value as it is rather than evaluate what the
// secret happens to hold (or makes with the text after it).
func (s *JobSpec) ExpandSecrets(values map[string]string, quote bool) map[string]string {
	used := map[string]string{}
	s.strings(func(p *string) {
		*p = SecretRefRE().ReplaceAllStringFunc(*p, func(m string) string {
			name := SecretRefRE().FindStringSubmatch(m)[1]
			v, ok := values[name]
			if ok {
				used[name] = v
			}
			if quote {
				return Literal(v)
			}
			return v
		})
	})
	return used
}

func cloneEnv(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Truncate is s as text a column or a protocol field takes: NUL bytes
// and bytes that are not UTF-8 become U+FFFD, and it is cut to at most n
// bytes, never inside a UTF-8 sequence. The messages stored through it
// quote what they were given (a pipeline's key, a condition, an answer
// from GitHub), which may hold either; refused by PostgreSQL, the message
// and the state change recorded with it would be lost.
func Truncate(s string, n int) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Literal is text as expressions that evaluate to it exactly: string
// literals (” for '), each of at most 16 KiB of the text, so that none
// is over an expression's size limit whatever the text holds.
func Literal(text string) string {
	const chunk = 16 << 10
	var b strings.Builder
	for {
		n := min(len(text), chunk)
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		b.WriteString("${{ '" + strings.ReplaceAll(text[:n], "'", "''") + "' }}")
		text = text[n:]
		if text == "" {
			return b.String()
		}
	}
}
