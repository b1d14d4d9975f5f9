package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Runs: creating one (and its jobs) and retrying one here; reading them in
// runs_read.go; what moves a run on (its state machine, cancel, approval)
// in runs_advance.go; the statements of all in runs_sql.go.

// NewJob is a job of a run being created: the type a parsed pipeline's
// jobs already are (pipeline.Job), so a caller passes them as they are.
type NewJob = domain.PlannedJob

// NewRun is a run being created. The pipeline has been parsed and validated
// by the caller; the store re-checks what it relies on (names, needs, DAG).
// The project must exist: creating a run never creates one.
type NewRun struct {
	Project  string // the project's name
	Trigger  string
	GitSHA   string
	GitRef   string
	GitDirty bool
	// Source is the verified snapshot; empty only in tests of the lease
	// core. It is registered as a blob of the run's (project, tier).
	Source domain.Source
	Jobs   []NewJob
	// Untrusted runs get no secrets and write only caches that trusted runs
	// never read (a pull request from a fork, a member without the secrets
	// permission).
	Untrusted bool
	// Scope is the ref whose caches the run reads first and the only one
	// it writes (default "manual"); BaseRef is a pull request's base
	// branch, read after Scope and before the default branch.
	Scope, BaseRef string
	// Actor is whom the run is for (user:<id>, github:<id>). An untrusted
	// run whose actor was never approved in the project waits for approval.
	Actor string
	// By, when set, is the user creating the run: CreateRun checks their
	// write permission in the run's transaction and sets the trigger,
	// scope and actor from them. Untrusted must then say what the caller
	// found (the tier the source was uploaded under); a change of the
	// user's secrets permission meanwhile is EConflict.
	By *User
	// Checks, when set, mirrors every job to a GitHub Check run: the outbox
	// rows are written with the run, in its transaction.
	Checks *CheckTarget
	// Workflow is the pipeline's name; HeadRef a pull request's branch
	// (facts its expressions read).
	Workflow, HeadRef string
	// Concurrency is the pipeline's concurrency group (nil: none).
	Concurrency *domain.Concurrency
	// RunName is the pipeline's run-name, a template of the run's facts
	// and inputs ("": the run has no name of its own).
	RunName string
	// Vars are the project variables the run gets (nil: the project's
	// now; a retry keeps its run's).
	Vars map[string]string
	// Inputs are a manual run's typed inputs.
	Inputs map[string]any
	// Schedules are the pipeline's on.schedule (nil: not known, as for a
	// retry): a trusted run of the default branch makes them the
	// project's.
	Schedules []domain.Schedule
	// SourceBy is the member whose submission the snapshot is
	// ("user:<id>"; "" for a GitHub project's): a run that runs it again
	// for someone else (a manual run, a retry, a schedule) keeps it, and
	// that member must still be allowed to start it, checked in the run's
	// transaction, or their code would run with the secrets after their
	// permission was taken away, as another's.
	SourceBy string
	// RetriedBy is the member who asked for this run as a retry
	// ("user:<id>"): it is another's run, repeated, but where an
	// environment prevents self-review the one who retried it may not
	// approve its deployment either.
	RetriedBy string
	// SourceToken is the API token whose request submitted the snapshot
	// (the creating request's, for a submission; the old run's, for a run
	// made again from it): while it is revoked, the snapshot is not run
	// again, checked in the run's transaction.
	SourceToken string
	// InputsToken is the API token whose request gave the inputs (set from
	// By for a run made with inputs; the old run's, for a run made again
	// with them): the source_token rule holds for it too.
	InputsToken string
	// EventAt is when the event the run is for happened (a delivery's
	// arrival); zero: the run is made for none earlier than now. In a
	// concurrency group, a run of an older event than an open run's is
	// superseded at once instead of taking the group.
	EventAt time.Time
}

// CheckTarget is where a run's check runs go.
type CheckTarget struct {
	RepositoryID int64
	HeadSHA      string
}

// Approval states of a run.
const (
	ApprovalNone     = "none"
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
)

// ReasonWaitingApproval is the reason of a job held until its run is approved.
const ReasonWaitingApproval = "waiting for approval"

// Run is a run as stored.
type Run struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	Project        string     `json:"project"`
	Number         int64      `json:"number"`
	State          string     `json:"state"`
	Trigger        string     `json:"trigger"`
	GitSHA         string     `json:"git_sha,omitempty"`
	GitRef         string     `json:"git_ref,omitempty"`
	GitDirty       bool       `json:"git_dirty"`
	SourceDigest   string     `json:"source_digest,omitempty"`
	ManifestDigest string     `json:"manifest_digest,omitempty"`
	SourceSize     int64      `json:"source_size,omitempty"`
	Trusted        bool       `json:"trusted"`
	Scope          string     `json:"scope"`
	BaseRef        string     `json:"base_ref,omitempty"`
	Actor          string     `json:"actor,omitempty"`
	Approval       string     `json:"approval"`
	ApprovalBy     string     `json:"approval_by,omitempty"`
	ApprovalAt     *time.Time `json:"approval_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	// JobIDs maps job names to IDs (set by CreateRun).
	JobIDs   map[string]string `json:"job_ids,omitempty"`
	Workflow string            `json:"workflow,omitempty"`
	HeadRef  string            `json:"head_ref,omitempty"`
	// RunName is the name its pipeline's run-name gave it; runNameSpec
	// is run-name, for a schedule's firing to evaluate again.
	RunName     string `json:"run_name,omitempty"`
	runNameSpec string
	// Vars are the project variables it was made with.
	Vars map[string]string `json:"vars,omitempty"`
	// ConcurrencyGroup is the run's group (lower case); Waiting while the
	// group's run in progress has not ended.
	ConcurrencyGroup   string `json:"concurrency_group,omitempty"`
	ConcurrencyWaiting bool   `json:"concurrency_waiting,omitempty"`
	ConcurrencyCancel  bool   `json:"concurrency_cancel_in_progress,omitempty"`
	// Inputs are a manual run's inputs.
	Inputs map[string]any `json:"inputs,omitempty"`
	// SourceBy is the member whose submission its snapshot is (NewRun).
	SourceBy string `json:"source_by,omitempty"`
	// RetriedBy is the member who retried its run (NewRun).
	RetriedBy string `json:"retried_by,omitempty"`
	// SourceToken is the API token whose request submitted its snapshot
	// (NewRun; not shown: another member's token's ID is theirs).
	SourceToken string `json:"-"`
	// InputsToken is the API token whose request gave its inputs (NewRun).
	InputsToken string `json:"-"`
	// jobGroups: a job of the new run has a concurrency group; canceled
	// are the runs its group's cancel-in-progress canceled. Their groups
	// are settled once the new run commits (afterCreate).
	jobGroups bool
	canceled  []string
	// concurrencySpec is the pipeline's concurrency, kept for schedules.
	concurrencySpec *domain.Concurrency
	// eventAt is NewRun.EventAt (nil: none).
	eventAt *time.Time
}

// CreateRun stores a run and its jobs as PENDING, then queues the jobs that
// need nothing (unless the run waits for approval).
func (s *Store) CreateRun(ctx context.Context, nr NewRun) (Run, error) {
	return s.queueRun(ctx, func(tx pgx.Tx) (Run, error) {
		return s.createRunTx(ctx, tx, nr)
	})
}

// queueRun runs fn, which makes a run, in a transaction and, once that
// commits, wakes this process's waiting claims for the jobs it queued.
func (s *Store) queueRun(ctx context.Context, fn func(tx pgx.Tx) (Run, error)) (Run, error) {
	run, err := inTxValue(ctx, s, fn)
	if err != nil {
		return Run{}, err
	}
	s.signalQueued()
	s.afterCreate(ctx, run)
	return run, nil
}

// afterCreate settles, once a new run has committed, the groups its jobs
// that need nothing joined, and those of the runs it canceled. The run
// stands whatever happens here (the sweeper settles what this leaves).
func (s *Store) afterCreate(ctx context.Context, run Run) {
	if run.jobGroups {
		_ = s.settleRunJobs(ctx, run.ID)
	}
	for _, id := range run.canceled {
		_ = s.afterRun(ctx, id)
	}
}

// createRunTx is CreateRun inside tx, for callers whose own change must
// commit with the run (a webhook delivery marked done).
func (s *Store) createRunTx(ctx context.Context, tx pgx.Tx, nr NewRun) (Run, error) {
	if err := validateJobs(nr.Jobs); err != nil {
		return Run{}, err
	}
	var projectID string
	err := tx.QueryRow(ctx, projectIDSQL, nr.Project).Scan(&projectID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, domain.Errorf(domain.ENotFound, "project %s not found", nr.Project)
	}
	if err != nil {
		return Run{}, fmt.Errorf("project %q: %w", nr.Project, err)
	}
	if err := runMakers(ctx, tx, &nr, projectID); err != nil {
		return Run{}, err
	}
	if nr.Trigger == "" {
		nr.Trigger = "manual"
	}
	if nr.Scope == "" {
		nr.Scope = "manual"
	}
	run := Run{ID: uuid.Must(uuid.NewV7()).String(), ProjectID: projectID, Project: nr.Project, Trigger: nr.Trigger,
		GitSHA: nr.GitSHA, GitRef: nr.GitRef, GitDirty: nr.GitDirty, JobIDs: map[string]string{},
		SourceDigest: nr.Source.BlobDigest, ManifestDigest: nr.Source.ManifestDigest, SourceSize: nr.Source.Size,
		Trusted: !nr.Untrusted, Scope: nr.Scope, BaseRef: nr.BaseRef, Actor: nr.Actor, Approval: ApprovalNone,
		Workflow: nr.Workflow, HeadRef: nr.HeadRef, Inputs: nr.Inputs, SourceBy: nr.SourceBy, RetriedBy: nr.RetriedBy,
		SourceToken: nr.SourceToken, InputsToken: nr.InputsToken}
	if err := tx.QueryRow(ctx, numberRunSQL, projectID).Scan(&run.Number); err != nil {
		return Run{}, fmt.Errorf("number run: %w", err)
	}
	if nr.Untrusted {
		var approved bool
		if err := tx.QueryRow(ctx, actorApprovedSQL, projectID, nr.Actor).Scan(&approved); err != nil {
			return Run{}, fmt.Errorf("approved actors: %w", err)
		}
		if !approved {
			run.Approval = ApprovalPending
		}
	}
	if err := madeFrom(ctx, tx, &run, nr); err != nil {
		return Run{}, err
	}
	run.concurrencySpec = nr.Concurrency
	if !nr.EventAt.IsZero() {
		run.eventAt = &nr.EventAt
	}
	if err := insertRun(ctx, tx, &run); err != nil {
		return Run{}, err
	}
	if err := trustedSpeaks(ctx, tx, projectID, &nr); err != nil {
		return Run{}, err
	}
	if err := insertJobs(ctx, tx, &run, nr); err != nil {
		return Run{}, err
	}
	if err := joinGroup(ctx, tx, &run, nr.Concurrency); err != nil {
		return Run{}, err
	}
	if err := s.registerSource(ctx, tx, run, nr.Source); err != nil {
		return Run{}, err
	}
	if err := setSchedules(ctx, tx, &run, nr.token(), nr.Schedules); err != nil {
		return Run{}, err
	}
	if err := advanceRun(ctx, tx, run.ID); err != nil {
		return Run{}, err
	}
	err = tx.QueryRow(ctx, runStateSQL, run.ID).Scan(&run.State, &run.CreatedAt)
	run.jobGroups = slices.ContainsFunc(nr.Jobs, func(j NewJob) bool { return j.Concurrency != nil })
	return run, err
}

// Retry creates a new run from a finished run: all its jobs, or only jobID,
// on the same source snapshot, in the same trust tier and cache scope (a
// retry of a fork's run stays untrusted, and waits for approval as the
// first did). The old run is left as it was. u needs the write role, and
// to retry a trusted run (which gets secrets again) the project's secrets
// permission, as starting a trusted run would.
func (s *Store) Retry(ctx context.Context, u User, runID, jobID string) (Run, error) {
	return s.queueRun(ctx, func(tx pgx.Tx) (Run, error) {
		_, a, err := authorizeRun(ctx, tx, u, runID, RankWrite)
		if err != nil {
			return Run{}, err
		}
		nr, err := retryOf(ctx, tx, runID, jobID, u.Name)
		if err != nil {
			return Run{}, err
		}
		if !nr.Untrusted && !a.Secrets {
			return Run{}, domain.Errorf(domain.EForbidden, "run %s is trusted (it gets the project's secrets): retrying it needs the secrets permission", runID)
		}
		nr.RetriedBy = "user:" + u.ID
		return s.createRunTx(ctx, tx, nr)
	})
}

// registerSource registers the run's snapshot as the project's blob,
// under its storage quota, after the run's row (whose reference to it is
// checked at the commit: runs_source_fkey is deferred) and after the
// jobs its concurrency group cancels are locked: a commit holds its job's
// row, then takes the quota's lock and the blob's key, in that order, as
// this does now. Taken first, the key deadlocked with a commit of the
// same bytes (an artifact of an unchanged workspace).
func (s *Store) registerSource(ctx context.Context, tx pgx.Tx, run Run, src domain.Source) error {
	if src.BlobDigest == "" {
		return nil
	}
	return s.registerBlob(ctx, tx, BlobRef{run.ProjectID, run.Trusted, src.BlobDigest}, src.Size)
}

func insertRun(ctx context.Context, tx pgx.Tx, run *Run) error {
	// The run names its snapshot's blob before registerSource registers
	// it: runs_source_fkey is checked at the commit (migration 00034).
	_, err := tx.Exec(ctx, insertRunSQL, run.ID, run.ProjectID, run.Number, run.Trigger, run.GitSHA, run.GitRef, run.GitDirty,
		run.SourceDigest, run.ManifestDigest, nullIfZero(run.SourceSize, run.SourceDigest),
		run.Trusted, run.Scope, run.BaseRef, run.Actor, run.Approval, run.Workflow, run.HeadRef, run.ConcurrencyGroup, run.ConcurrencyCancel, run.Inputs,
		run.concurrencySpec, run.eventAt, run.SourceBy, run.RetriedBy, run.SourceToken, run.InputsToken, run.RunName, run.runNameSpec, run.Vars)
	if err != nil {
		return fmt.Errorf("insert run: %w", err)
	}
	return nil
}

// trustedSpeaks drops the check runs of an untrusted run of a commit a
// trusted run of the project has built: GitHub shows a commit's newest
// check run of each name, and a fork's pull request whose head is that
// commit (a maintainer's branch, say) must not restate its checks, with
// jobs skipped by conditions on the event, no secrets, caches of its own.
// The trusted run's checks stand for the commit.
func trustedSpeaks(ctx context.Context, tx pgx.Tx, projectID string, nr *NewRun) error {
	if !nr.Untrusted || nr.Checks == nil {
		return nil
	}
	var built bool
	if err := tx.QueryRow(ctx, trustedRunOfCommitSQL, projectID, nr.Source.BlobDigest, nr.Checks.HeadSHA).Scan(&built); err != nil {
		return fmt.Errorf("trusted runs of the commit: %w", err)
	}
	if built {
		nr.Checks = nil
	}
	return nil
}

func insertJobs(ctx context.Context, tx pgx.Tx, run *Run, nr NewRun) error {
	var reason *string
	if run.Approval == ApprovalPending {
		r := ReasonWaitingApproval
		reason = &r
	}
	// The run's variables are not copied into each job: the claim and the
	// conditions read them off the run (a 200-job matrix would hold them
	// 200 times).
	facts := runFacts(run)
	facts.Vars = nil
	for i, j := range nr.Jobs {
		id := uuid.Must(uuid.NewV7()).String()
		run.JobIDs[j.Name] = id
		j.Spec.Run = &facts
		timeout := j.TimeoutSeconds
		if timeout <= 0 {
			timeout = 3600
		}
		labels, err := jobLabels(run, j)
		if err != nil {
			return err
		}
		// The spec column holds the claim response's job object whole.
		features := j.Spec.Features()
		spec, err := json.Marshal(domain.ClaimedJob{ID: id, RunID: run.ID, Name: j.Name,
			Needs: nonNil(j.Needs), TimeoutSeconds: timeout, Features: features, JobSpec: j.Spec})
		if err != nil {
			return fmt.Errorf("encode spec of job %s: %w", j.Name, err)
		}
		c := conditionOf(j)
		if _, err := tx.Exec(ctx, insertJobSQL, id, run.ID, j.Name, nonNil(j.Needs), nonNil(labels), spec, timeout, j.RetryLeaseLost, j.RetryFailed,
			nonNil(j.Spec.SecretNames()), reason, run.ProjectID, run.Trusted, nonNil(features),
			c.group, c.condition, c.status, c.survivesCancel, j.ContinueOnError, j.FailFast, j.MaxParallel, j.ReadsNeeds,
			c.concurrency, c.cancelInProgress, c.cancelExpr, envTemplate(j.Spec)); err != nil {
			return fmt.Errorf("insert job %s: %w", j.Name, err)
		}
		// A run waiting for approval shows on the commit through its
		// first job's check run only: a stranger's pull request of a
		// thousand jobs must not cost GitHub calls by the thousand at
		// every push. The others come with the approval.
		if nr.Checks != nil && (i == 0 || run.Approval != ApprovalPending) {
			if _, err := tx.Exec(ctx, insertJobCheckSQL, id, nr.Checks.RepositoryID, nr.Checks.HeadSHA, j.Name); err != nil {
				return fmt.Errorf("check run of job %s: %w", j.Name, err)
			}
		}
	}
	return nil
}

// runFacts are the run's facts its jobs' expressions read (forgeci.*).
// The event is GitHub's event name for a delivery's run, "submit" for
// forgeci submit, "retry" for a retry, and "manual" otherwise.
func runFacts(run *Run) domain.RunFacts {
	event := "manual"
	switch {
	case strings.HasPrefix(run.Trigger, "github:"):
		event, _, _ = strings.Cut(strings.TrimPrefix(run.Trigger, "github:"), " ")
	case strings.HasPrefix(run.Trigger, "cli:"):
		event = "submit"
	case strings.HasPrefix(run.Trigger, "retry of"):
		event = "retry"
	case strings.HasPrefix(run.Trigger, "dispatch:"):
		event = "workflow_dispatch"
	case strings.HasPrefix(run.Trigger, "schedule:"):
		event = "schedule"
	}
	name := strings.TrimPrefix(strings.TrimPrefix(run.GitRef, "refs/heads/"), "refs/tags/")
	return domain.RunFacts{Ref: run.GitRef, RefName: name, SHA: run.GitSHA, EventName: event, Actor: run.Actor,
		Repository: run.Project, RunID: run.ID, RunNumber: run.Number, Workflow: run.Workflow,
		HeadRef: run.HeadRef, BaseRef: strings.TrimPrefix(run.BaseRef, "refs/heads/"), Inputs: run.Inputs, Vars: run.Vars}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nullIfZero(size int64, digest string) *int64 {
	if digest == "" {
		return nil
	}
	return &size
}

// validateJobs checks what the store relies on: unique names, known needs,
// no cycles.
func validateJobs(jobs []NewJob) error {
	if len(jobs) == 0 {
		return domain.Errorf(domain.EInvalid, "a run needs at least one job")
	}
	if len(jobs) > 1000 {
		return domain.Errorf(domain.EInvalid, "a run may have at most 1000 jobs")
	}
	byName := map[string]NewJob{}
	names := make([]string, 0, len(jobs))
	for _, j := range jobs {
		if j.Name == "" {
			return domain.Errorf(domain.EInvalid, "every job needs a name")
		}
		if _, dup := byName[j.Name]; dup {
			return domain.Errorf(domain.EInvalid, "job name %q is used twice", j.Name)
		}
		if err := domain.ValidateLabels(slices.DeleteFunc(slices.Clone(j.Labels), isTemplate)); err != nil {
			return err // the templates are checked once evaluated (jobLabels)
		}
		byName[j.Name] = j
		names = append(names, j.Name)
	}
	for _, j := range jobs {
		for _, n := range j.Needs {
			if _, ok := byName[n]; !ok {
				return domain.Errorf(domain.EInvalid, "job %q needs unknown job %q", j.Name, n)
			}
		}
	}
	if cycles := domain.NeedCycles(names, func(i int) []string { return jobs[i].Needs }); len(cycles) > 0 {
		return domain.Errorf(domain.EInvalid, "jobs form a cycle: %v", cycles[0].Path)
	}
	return nil
}
