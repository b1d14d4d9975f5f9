package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

// NewJob is a job of a run being created.
type NewJob struct {
	Name           string
	Needs          []string
	Labels         []string
	Spec           domain.JobSpec
	TimeoutSeconds int
	RetryLeaseLost int
	RetryFailed    int
}

// JobsOf turns a parsed pipeline into the jobs of a new run.
func JobsOf(p *pipeline.Pipeline) []NewJob {
	jobs := make([]NewJob, 0, len(p.Jobs))
	for _, j := range p.Jobs {
		jobs = append(jobs, NewJob{Name: j.Name, Needs: j.Needs, Labels: j.Labels, Spec: j.Spec,
			TimeoutSeconds: j.TimeoutSeconds, RetryLeaseLost: j.RetryLeaseLost, RetryFailed: j.RetryFailed})
	}
	return jobs
}

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
	JobIDs map[string]string `json:"job_ids,omitempty"`
}

// CreateRun stores a run and its jobs as PENDING, then queues the jobs that
// need nothing (unless the run waits for approval).
func (s *Store) CreateRun(ctx context.Context, nr NewRun) (Run, error) {
	var run Run
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		run, err = s.createRunTx(ctx, tx, nr)
		return err
	})
	if err != nil {
		return Run{}, err
	}
	s.signalQueued()
	return run, nil
}

// createRunTx is CreateRun inside tx, for callers whose own change must
// commit with the run (a webhook delivery marked done).
func (s *Store) createRunTx(ctx context.Context, tx pgx.Tx, nr NewRun) (Run, error) {
	if err := validateJobs(nr.Jobs); err != nil {
		return Run{}, err
	}
	var projectID string
	err := tx.QueryRow(ctx, `SELECT id FROM projects WHERE name = $1`, nr.Project).Scan(&projectID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, domain.Errorf(domain.ENotFound, "project %s not found", nr.Project)
	}
	if err != nil {
		return Run{}, fmt.Errorf("project %q: %w", nr.Project, err)
	}
	if nr.By != nil {
		if err := runBy(ctx, tx, &nr, projectID); err != nil {
			return Run{}, err
		}
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
		Trusted: !nr.Untrusted, Scope: nr.Scope, BaseRef: nr.BaseRef, Actor: nr.Actor, Approval: ApprovalNone}
	if err := tx.QueryRow(ctx, `UPDATE projects SET next_run_number = next_run_number + 1 WHERE id = $1
		RETURNING next_run_number`, projectID).Scan(&run.Number); err != nil {
		return Run{}, fmt.Errorf("number run: %w", err)
	}
	if nr.Untrusted {
		var approved bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approved_actors WHERE project_id = $1 AND actor = $2)`,
			projectID, nr.Actor).Scan(&approved); err != nil {
			return Run{}, fmt.Errorf("approved actors: %w", err)
		}
		if !approved {
			run.Approval = ApprovalPending
		}
	}
	if nr.Source.BlobDigest != "" {
		if err := s.registerBlob(ctx, tx, BlobRef{projectID, run.Trusted, nr.Source.BlobDigest}, nr.Source.Size); err != nil {
			return Run{}, err
		}
	}
	if err := insertRun(ctx, tx, &run); err != nil {
		return Run{}, err
	}
	if err := insertJobs(ctx, tx, &run, nr); err != nil {
		return Run{}, err
	}
	if err := advanceRun(ctx, tx, run.ID); err != nil {
		return Run{}, err
	}
	err = tx.QueryRow(ctx, `SELECT state, created_at FROM runs WHERE id = $1`, run.ID).Scan(&run.State, &run.CreatedAt)
	return run, err
}

// runBy checks that the user creating a run may write to the project and
// sets what the server, not the client, says about the run.
func runBy(ctx context.Context, tx pgx.Tx, nr *NewRun, projectID string) error {
	a, err := authorize(ctx, tx, *nr.By, projectID, RankWrite, "project "+nr.Project)
	if err != nil {
		return err
	}
	if a.Secrets == nr.Untrusted {
		return domain.Errorf(domain.EConflict, "your secrets permission in %s changed while the run was being created; submit again", nr.Project)
	}
	if nr.Trigger == "" {
		nr.Trigger = "cli:" + nr.By.Name
	}
	if nr.Scope == "" {
		nr.Scope = "cli/" + nr.By.Name
	}
	if nr.Actor == "" {
		nr.Actor = "user:" + nr.By.ID
	}
	return nil
}

func insertRun(ctx context.Context, tx pgx.Tx, run *Run) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO runs (id, project_id, number, trigger, git_sha, git_ref, git_dirty,
		                  source_digest, manifest_digest, source_size, trusted, scope, base_ref, actor, approval)
		VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), $7, nullif($8, ''), nullif($9, ''), $10, $11,
		        $12, nullif($13, ''), $14, $15)`,
		run.ID, run.ProjectID, run.Number, run.Trigger, run.GitSHA, run.GitRef, run.GitDirty,
		run.SourceDigest, run.ManifestDigest, nullIfZero(run.SourceSize, run.SourceDigest),
		run.Trusted, run.Scope, run.BaseRef, run.Actor, run.Approval)
	if err != nil {
		return fmt.Errorf("insert run: %w", err)
	}
	return nil
}

func insertJobs(ctx context.Context, tx pgx.Tx, run *Run, nr NewRun) error {
	var reason *string
	if run.Approval == ApprovalPending {
		r := ReasonWaitingApproval
		reason = &r
	}
	for _, j := range nr.Jobs {
		id := uuid.Must(uuid.NewV7()).String()
		run.JobIDs[j.Name] = id
		timeout := j.TimeoutSeconds
		if timeout <= 0 {
			timeout = 3600
		}
		// The spec column holds the claim response's job object whole.
		spec, err := json.Marshal(domain.ClaimedJob{ID: id, RunID: run.ID, Name: j.Name,
			Needs: nonNil(j.Needs), TimeoutSeconds: timeout, JobSpec: j.Spec})
		if err != nil {
			return fmt.Errorf("encode spec of job %s: %w", j.Name, err)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO jobs (id, run_id, name, state, needs, labels, spec, timeout_seconds, retry_lease_lost,
			                  retry_failed, secret_names, reason, project_id, trusted)
			VALUES ($1, $2, $3, 'PENDING', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			id, run.ID, j.Name, nonNil(j.Needs), nonNil(j.Labels), spec, timeout, j.RetryLeaseLost, j.RetryFailed,
			nonNil(j.Spec.SecretNames()), reason, run.ProjectID, run.Trusted); err != nil {
			return fmt.Errorf("insert job %s: %w", j.Name, err)
		}
		if nr.Checks != nil {
			if _, err := tx.Exec(ctx, `
				INSERT INTO check_runs (job_id, repository_id, head_sha, name) VALUES ($1, $2, $3, $4)`,
				id, nr.Checks.RepositoryID, nr.Checks.HeadSHA, j.Name); err != nil {
				return fmt.Errorf("check run of job %s: %w", j.Name, err)
			}
		}
	}
	return nil
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
	for _, j := range jobs {
		if j.Name == "" {
			return domain.Errorf(domain.EInvalid, "every job needs a name")
		}
		if _, dup := byName[j.Name]; dup {
			return domain.Errorf(domain.EInvalid, "job name %q is used twice", j.Name)
		}
		if err := ValidateLabels(j.Labels); err != nil {
			return err
		}
		byName[j.Name] = j
	}
	const (
		unseen = iota
		visiting
		done
	)
	mark := map[string]int{}
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch mark[name] {
		case visiting:
			return domain.Errorf(domain.EInvalid, "jobs form a cycle: %v", append(path, name))
		case done:
			return nil
		}
		mark[name] = visiting
		for _, n := range byName[name].Needs {
			if _, ok := byName[n]; !ok {
				return domain.Errorf(domain.EInvalid, "job %q needs unknown job %q", name, n)
			}
			if err := visit(n, append(path, name)); err != nil {
				return err
			}
		}
		mark[name] = done
		return nil
	}
	for _, j := range jobs {
		if err := visit(j.Name, nil); err != nil {
			return err
		}
	}
	return nil
}

// lockRunSQL takes the run row's lock (see advanceRun for the order).
const lockRunSQL = `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`

// advanceRun moves a run forward after any job transition, inside the
// caller's transaction: dependants of jobs that did not pass become SKIPPED
// (transitively), pending jobs whose needs all passed become QUEUED (unless
// the run waits for approval), and the run's state is derived from its jobs.
//
// It locks the run row first, so that two jobs of one run finishing at the
// same time take turns here; under READ COMMITTED the second then sees the
// first's committed state and no dependant is left PENDING forever. Lock
// order: the queued or running job row(s) a transition is about, then the
// run row, then (here) the pending rows it queues or skips, which only a
// holder of the run's lock writes.
//
// The four statements go as one pipelined batch: the run row stays locked
// from the first to the commit, and every job of the run that finishes
// waits for it, so the lock is held for one round trip instead of four.
// The run row is written only when its state or times change: most
// completions change nothing there, and a write would leave one more row
// version behind for every completion (which an old snapshot keeps alive).
func advanceRun(ctx context.Context, tx pgx.Tx, runID string) error {
	b := &pgx.Batch{}
	b.Queue(lockRunSQL, runID)
	b.Queue(`
		WITH RECURSIVE doomed (id, name) AS (
		    SELECT d.id, d.name FROM jobs d
		    WHERE d.run_id = $1 AND d.state = 'PENDING'
		      AND EXISTS (SELECT 1 FROM jobs n WHERE n.run_id = d.run_id AND n.name = ANY (d.needs)
		                  AND n.state IN ('FAILED', 'CANCELED', 'ABORTED', 'SKIPPED'))
		  UNION
		    SELECT d.id, d.name FROM jobs d JOIN doomed x ON x.name = ANY (d.needs)
		    WHERE d.run_id = $1 AND d.state = 'PENDING'
		)
		UPDATE jobs SET state = 'SKIPPED', reason = 'need_not_passed', finished_at = now()
		WHERE id IN (SELECT id FROM doomed) AND state = 'PENDING'`, runID)
	b.Queue(`
		UPDATE jobs d SET state = 'QUEUED', queued_at = now()
		WHERE d.run_id = $1 AND d.state = 'PENDING'
		  AND NOT EXISTS (SELECT 1 FROM jobs n WHERE n.run_id = d.run_id AND n.name = ANY (d.needs)
		                  AND n.state <> 'PASSED')
		  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = $1 AND r.approval = 'pending')`, runID)
	b.Queue(`
		WITH c AS (
		    SELECT count(*) FILTER (WHERE state IN ('PENDING', 'QUEUED', 'RUNNING')) AS open,
		           count(*) FILTER (WHERE state = 'RUNNING' OR started_at IS NOT NULL) AS started,
		           count(*) FILTER (WHERE state = 'FAILED') AS failed,
		           count(*) FILTER (WHERE state = 'ABORTED') AS aborted,
		           count(*) FILTER (WHERE state = 'CANCELED') AS canceled
		    FROM jobs WHERE run_id = $1
		), n AS (
		    SELECT CASE
		               WHEN c.open > 0 AND c.started > 0 THEN 'RUNNING'
		               WHEN c.open > 0 THEN 'PENDING'
		               WHEN c.failed > 0 THEN 'FAILED'
		               WHEN c.aborted > 0 THEN 'ABORTED'
		               WHEN c.canceled > 0 THEN 'CANCELED'
		               ELSE 'PASSED' END AS state,
		           CASE WHEN c.started > 0 THEN coalesce(r.started_at, now()) ELSE r.started_at END AS started_at,
		           CASE WHEN c.open = 0 THEN coalesce(r.finished_at, now()) END AS finished_at
		    FROM c, runs r WHERE r.id = $1
		)
		UPDATE runs r SET state = n.state, started_at = n.started_at, finished_at = n.finished_at
		FROM n
		WHERE r.id = $1 AND (r.state, r.started_at, r.finished_at) IS DISTINCT FROM (n.state, n.started_at, n.finished_at)`, runID)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("advance run %s: %w", runID, err)
	}
	return nil
}

// runColumns are the columns scanRun reads, from runs r joined to projects p.
const runColumns = `r.id, r.project_id, p.name, r.number, r.state, r.trigger, coalesce(r.git_sha, ''),
	coalesce(r.git_ref, ''), r.git_dirty, coalesce(r.source_digest, ''), coalesce(r.manifest_digest, ''),
	coalesce(r.source_size, 0), r.trusted, r.scope, coalesce(r.base_ref, ''), r.actor, r.approval,
	coalesce(r.approval_by, ''), r.approval_at, r.created_at, r.started_at, r.finished_at`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	err := row.Scan(&r.ID, &r.ProjectID, &r.Project, &r.Number, &r.State, &r.Trigger, &r.GitSHA, &r.GitRef,
		&r.GitDirty, &r.SourceDigest, &r.ManifestDigest, &r.SourceSize, &r.Trusted, &r.Scope, &r.BaseRef,
		&r.Actor, &r.Approval, &r.ApprovalBy, &r.ApprovalAt, &r.CreatedAt, &r.StartedAt, &r.FinishedAt)
	return r, err
}

// GetRun returns a run by ID (operator tools and tests; people use GetRunAs).
func (s *Store) GetRun(ctx context.Context, runID string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+`
		FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1`, runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, domain.Errorf(domain.ENotFound, "run %s not found", runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run: %w", err)
	}
	return r, nil
}

// GetRunAs returns a run u may read; any other is ENotFound.
func (s *Store) GetRunAs(ctx context.Context, u User, runID string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+`
		FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1 AND `+canRead("$2", "r.project_id"),
		runID, u.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, domain.Errorf(domain.ENotFound, "run %s not found", runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run: %w", err)
	}
	return r, nil
}

// JobInfo is a job as users see it.
type JobInfo struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	State      string     `json:"state"`
	Needs      []string   `json:"needs"`
	Generation int        `json:"generation"`
	RunnerID   string     `json:"runner_id,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	LogSize    int64      `json:"log_size"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// RunJobs returns the jobs of a run in creation order.
func (s *Store) RunJobs(ctx context.Context, runID string) ([]JobInfo, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, name, state, needs, generation, coalesce(runner_id, ''), coalesce(reason, ''), exit_code,
		       log_size, started_at, finished_at
		FROM jobs WHERE run_id = $1 ORDER BY created_at, id`, runID)
	if err != nil {
		return nil, fmt.Errorf("run jobs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (JobInfo, error) {
		var j JobInfo
		err := row.Scan(&j.ID, &j.Name, &j.State, &j.Needs, &j.Generation, &j.RunnerID, &j.Reason, &j.ExitCode,
			&j.LogSize, &j.StartedAt, &j.FinishedAt)
		return j, err
	})
}
