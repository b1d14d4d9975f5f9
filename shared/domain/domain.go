package domain

import "time"

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
	case l.Generation <= 0:
		return Errorf(EInvalid, "field lease.generation must be a positive integer")
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
}

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
}

// ClaimedJob is the "job" object of a claim response.
type ClaimedJob struct {
	ID             string   `json:"id"`
	RunID          string   `json:"run_id"`
	Name           string   `json:"name"`
	Needs          []string `json:"needs"`
	TimeoutSeconds int      `json:"timeout_seconds"`
	JobSpec
}

// Source identifies the immutable snapshot a run executes.
type Source struct {
	BlobDigest     string `json:"blob_digest"`
	ManifestDigest string `json:"manifest_digest"`
	Size           int64  `json:"size"`
}

// Claim is a successful claim: the lease, what to run, and on what source.
type Claim struct {
	Lease           Lease      `json:"lease"`
	Job             ClaimedJob `json:"job"`
	Source          Source     `json:"source"`
	LeaseTTLSeconds int        `json:"lease_ttl_seconds"`
	// Secrets join the job's environment; the runner redacts their values
	// from the log.
	Secrets map[string]string `json:"secrets,omitempty"`
}
