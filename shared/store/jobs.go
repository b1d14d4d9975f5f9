package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Jobs and their leases: the heartbeat and the end of an attempt here;
// the lease check in lease.go, claims in claim.go, logs in logs.go, the
// sweeper in sweep.go.

// heartbeatSQL is the heartbeat's fast path: the whole lease check and the
// extension in one statement (the UPDATE holds the row until commit). It
// also refreshes the displayed log size from the log itself. A lease only
// ever moves later: a heartbeat whose now() is earlier than another's that
// committed first (it waited for the row) must not take back what that one
// gave, which its runner already counts on.
const heartbeatSQL = `
UPDATE jobs j SET lease_expires_at = greatest(j.lease_expires_at, now() + make_interval(secs => $6)),
       log_size = ` + logEndSQL + `
FROM runs r
WHERE ` + leaseMatchSQL + ` AND r.id = j.run_id
RETURNING j.lease_expires_at, ` + cancelAskedSQL

// extendLeaseSQL is the heartbeat's slow path, under withLease's row lock:
// its now() is its transaction's start, so it too only moves the lease
// later.
const extendLeaseSQL = `
UPDATE jobs SET lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $2))
WHERE id = $1 RETURNING lease_expires_at`

// recordAttemptSQL writes the attempt row of job $1's generation $2 as its
// lease ends: the lease's record, with the log's exact end.
const recordAttemptSQL = `
INSERT INTO job_attempts (job_id, generation, runner_id, lease_id, started_at, ended_at,
                          outcome, reason, exit_code, log_size)
SELECT j.id, j.generation, j.runner_id, j.lease_id, j.started_at, now(), $3, nullif($4, ''), $5, ` + logEndSQL + `
FROM jobs j WHERE j.id = $1 AND j.generation = $2`

// retryDueSQL asks whether job $1's retry policy allows another attempt
// after one more loss of kind $2 (FAILED or ABORTED), the attempt just
// recorded counting as the first try. A claim never delivered (ABORTED,
// undeliveredReason) ran nothing and does not count.
const retryDueSQL = `
SELECT CASE
         WHEN $2 = 'FAILED'  THEN j.retry_failed
         WHEN $2 = 'ABORTED' THEN j.retry_lease_lost
         ELSE 0
       END > (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id AND a.outcome = $2
              AND NOT (a.outcome = 'ABORTED' AND starts_with(coalesce(a.reason, ''), '` + undeliveredReason + `'))) - 1
   AND NOT j.cancel_requested AND NOT r.cancel_requested
FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id = $1`

// requeueJobSQL puts a job whose attempt ended back in the queue; the lease
// columns stay as they were (see finishAttempt).
const requeueJobSQL = `
UPDATE jobs SET state = 'QUEUED', queued_at = now(), reason = nullif($2, ''), exit_code = $3,
       log_size = (SELECT log_size FROM job_attempts WHERE job_id = $1 AND generation = jobs.generation)
WHERE id = $1
RETURNING deploy_state IS NOT NULL`

// finishJobSQL makes a job terminal with its last attempt's outcome.
const finishJobSQL = `
UPDATE jobs SET state = $2, finished_at = now(), reason = nullif($3, ''), exit_code = $4,
       log_size = (SELECT log_size FROM job_attempts WHERE job_id = $1 AND generation = jobs.generation)
WHERE id = $1`

// runJobsSQL lists the jobs of run $1 in creation order.
const runJobsSQL = `
SELECT j.id, j.name, j.state, j.needs, j.generation, coalesce(j.runner_id, ''), coalesce(j.reason, ''), j.exit_code,
       j.log_size, j.started_at, j.finished_at, t.tests, t.passed, t.failed, t.errored, t.skipped,
       coalesce(j.environment, ''), CASE WHEN j.deploy_state = 'waiting' AND j.state <> 'PENDING' THEN '' ELSE coalesce(j.deploy_state, '') END
FROM jobs j LEFT JOIN job_reports t ON t.job_id = j.id AND t.generation = j.generation
WHERE j.run_id = $1 ORDER BY j.created_at, j.id`

// getJobSQL reads job $1 of run $2 if user $3 may read its project.
const getJobSQL = `
SELECT j.id, j.run_id, j.name, j.state, j.needs, j.labels, j.generation, coalesce(j.runner_id, ''),
       coalesce(j.reason, ''), j.exit_code, j.log_size, j.started_at, j.finished_at,
       coalesce(j.environment, ''), CASE WHEN j.deploy_state = 'waiting' AND j.state <> 'PENDING' THEN '' ELSE coalesce(j.deploy_state, '') END
FROM jobs j JOIN runs r ON r.id = j.run_id
WHERE j.id = $1 AND j.run_id = $2 AND project_rank($3, r.project_id) >= 1`

// jobAttemptsSQL lists job $1's ended attempts and its current lease, if
// any, as one list by generation.
const jobAttemptsSQL = `
SELECT a.generation, a.runner_id, coalesce(r.name, ''), a.started_at, a.ended_at, a.outcome,
       coalesce(a.reason, ''), a.exit_code, a.log_size
FROM job_attempts a LEFT JOIN runners r ON r.id = a.runner_id
WHERE a.job_id = $1
UNION ALL
SELECT j.generation, j.runner_id, coalesce(r.name, ''), j.started_at, NULL, 'RUNNING', '', NULL, j.log_size
FROM jobs j LEFT JOIN runners r ON r.id = j.runner_id
WHERE j.id = $1 AND j.state = 'RUNNING'
ORDER BY 1`

// Heartbeat extends a current lease by the lease TTL from the database's
// now() and reports whether cancellation was requested.
func (s *Store) Heartbeat(ctx context.Context, runnerID, jobID string, l domain.Lease) (expires time.Time, cancel bool, err error) {
	if err := checkTuple(runnerID, jobID, l); err != nil {
		return expires, false, err
	}
	err = s.pool.QueryRow(ctx, heartbeatSQL, l.JobID, l.RunID, l.RunnerID, l.LeaseID, l.Generation,
		s.limits.LeaseTTL.Seconds()).Scan(&expires, &cancel)
	if !errors.Is(err, pgx.ErrNoRows) {
		if err != nil {
			err = fmt.Errorf("heartbeat: %w", err)
		}
		return expires, cancel, err
	}
	// Not current: the full check says why (and extends it should the
	// lease have become current meanwhile, which it cannot, but the slow
	// path is correct either way).
	err = s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		cancel = job.CancelRequested
		return tx.QueryRow(ctx, extendLeaseSQL, job.ID, s.limits.LeaseTTL.Seconds()).Scan(&expires)
	})
	return expires, cancel, err
}

// Completion is what Complete did.
type Completion struct {
	// State is the outcome recorded for this attempt: PASSED, FAILED or CANCELED.
	State string
	// JobState is the job's state now: State, or QUEUED when a retry policy
	// re-queued the job as a new generation.
	JobState string
}

// Complete ends the current attempt with the runner's outcome. A failure
// re-queues the job when its retry policy allows; otherwise the job becomes
// terminal and the run moves on.
func (s *Store) Complete(ctx context.Context, runnerID, jobID string, l domain.Lease, outcome domain.Outcome, exitCode int) (Completion, error) {
	return s.CompleteWithReason(ctx, runnerID, jobID, l, outcome, exitCode, "")
}

// CompleteWithReason is Complete with the runner's reason for a failure
// (such as "timeout"); empty means "exit_code N". The reason is masked
// with the job's secrets before it is stored (see maskReason).
func (s *Store) CompleteWithReason(ctx context.Context, runnerID, jobID string, l domain.Lease, outcome domain.Outcome, exitCode int, why string) (Completion, error) {
	var c Completion
	if len(why) > 200 {
		return c, domain.Errorf(domain.EInvalid, "field reason is at most 200 characters")
	}
	switch outcome {
	case domain.OutcomePassed:
		c.State = domain.JobPassed
	case domain.OutcomeFailed:
		c.State = domain.JobFailed
	case domain.OutcomeCanceled:
		c.State = domain.JobCanceled
	default:
		return c, domain.Errorf(domain.EInvalid, `field outcome must be "passed", "failed" or "canceled"`)
	}
	if c.State == domain.JobFailed && why != "" {
		// Before the transaction: opening secrets may call KMS, and the
		// job row must not stay locked meanwhile. The lease first, so the
		// secrets are opened only for the runner that holds it (the
		// transaction below checks it again).
		if _, err := s.CheckLease(ctx, runnerID, jobID, l); err != nil {
			return c, err
		}
		why = s.maskReason(ctx, jobID, why)
	}
	var requeued bool
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if c.State == domain.JobCanceled && !job.CancelRequested {
			return domain.Errorf(domain.EInvalid, `outcome "canceled" is only valid after cancellation was requested`)
		}
		reason := ""
		switch c.State {
		case domain.JobFailed:
			reason = fmt.Sprintf("%s %d", domain.ReasonExitCode, exitCode)
			if why != "" {
				reason = why
			}
		case domain.JobCanceled:
			reason = domain.ReasonCanceled
		}
		var err error
		c.JobState, err = finishAttempt(ctx, tx, job.ID, job.RunID, job.Generation, c.State, reason, &exitCode)
		requeued = c.JobState == domain.JobQueued
		return err
	})
	if err == nil && requeued {
		s.signalQueued()
	}
	if err == nil && c.JobState == domain.JobFailed {
		// The completion stands whatever happens here: at worst the
		// matrix's other combinations run to their ends.
		_, _ = s.failFast(ctx, l.RunID)
	}
	if err == nil && !requeued {
		// Likewise: the sweeper releases a group this leaves waiting.
		_ = s.afterRun(ctx, l.RunID)
	}
	return c, err
}

// finishAttempt closes the attempt of the locked job's given generation with
// outcome, then either re-queues the job (when its explicit retry policy
// still allows another attempt for this kind of loss) or makes it terminal,
// and advances the run. It returns the job's new state.
func finishAttempt(ctx context.Context, tx pgx.Tx, jobID, runID string, generation int, outcome, reason string, exitCode *int) (string, error) {
	// The attempt row is the lease's record, written as the lease ends.
	if _, err := tx.Exec(ctx, recordAttemptSQL, jobID, generation, outcome, reason, exitCode); err != nil {
		return "", fmt.Errorf("record attempt: %w", err)
	}
	var retry bool
	if err := tx.QueryRow(ctx, retryDueSQL, jobID, outcome).Scan(&retry); err != nil {
		return "", fmt.Errorf("retry policy: %w", err)
	}
	if retry {
		// The lease columns stay as they were: the old owner's tuple still
		// names this job but the job is not RUNNING, and the next claim
		// moves the generation on, so every call of the old lease is fenced.
		noteQueued(tx)
		var deploys bool
		if err := tx.QueryRow(ctx, requeueJobSQL, jobID, reason, exitCode).Scan(&deploys); err != nil {
			return "", fmt.Errorf("requeue job: %w", err)
		}
		if deploys {
			// Its environment's rules may have changed since it was let
			// through: the claim then passes it over, and the sweeper
			// gates it again (deployregate.go).
			noteSweep(tx)
		}
		return domain.JobQueued, nil
	}
	if outcome == domain.JobPassed {
		if err := promoteCaches(ctx, tx, jobID, generation); err != nil {
			return "", err
		}
	}
	if _, err := tx.Exec(ctx, finishJobSQL, jobID, outcome, reason, exitCode); err != nil {
		return "", fmt.Errorf("finish job: %w", err)
	}
	if err := advanceRun(ctx, tx, runID); err != nil {
		return "", err
	}
	return outcome, nil
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
	// Tests are the counts of the current attempt's test reports (nil:
	// it sent none).
	Tests *TestCounts `json:"tests,omitempty"`
	// Environment is the environment the job deploys to, once its needs
	// ended; DeployState is "waiting" while its deployment waits for a
	// review, "approved" once it may go.
	Environment string `json:"environment,omitempty"`
	DeployState string `json:"deploy_state,omitempty"`
}

// TestCounts are a test report's counts.
type TestCounts struct {
	Tests   int `json:"tests"`
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Errored int `json:"errored"`
	Skipped int `json:"skipped"`
}

// RunJobs returns the jobs of a run in creation order.
func (s *Store) RunJobs(ctx context.Context, runID string) ([]JobInfo, error) {
	rows, err := s.pool.Query(ctx, runJobsSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("run jobs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (JobInfo, error) {
		var j JobInfo
		var tests, passed, failed, errored, skipped *int
		err := row.Scan(&j.ID, &j.Name, &j.State, &j.Needs, &j.Generation, &j.RunnerID, &j.Reason, &j.ExitCode,
			&j.LogSize, &j.StartedAt, &j.FinishedAt, &tests, &passed, &failed, &errored, &skipped, &j.Environment, &j.DeployState)
		if tests != nil {
			j.Tests = &TestCounts{*tests, *passed, *failed, *errored, *skipped}
		}
		return j, err
	})
}

// Attempt is one lease of a job: ended ones from job_attempts, the current
// one from the job row.
type Attempt struct {
	Generation int        `json:"generation"`
	RunnerID   string     `json:"runner_id"`
	RunnerName string     `json:"runner_name"`
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	Outcome    string     `json:"outcome"` // RUNNING for the current lease
	Reason     string     `json:"reason,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	LogSize    int64      `json:"log_size"`
}

// JobDetail is a job with its attempts.
type JobDetail struct {
	JobInfo
	RunID    string    `json:"run_id"`
	Labels   []string  `json:"labels"`
	Attempts []Attempt `json:"attempts"`
}

// GetJob returns a job of a run u may read, and its attempts, oldest first.
func (s *Store) GetJob(ctx context.Context, u User, runID, jobID string) (JobDetail, error) {
	var d JobDetail
	err := s.pool.QueryRow(ctx, getJobSQL, jobID, runID, u.ID).Scan(&d.ID, &d.RunID, &d.Name, &d.State, &d.Needs,
		&d.Labels, &d.Generation, &d.RunnerID, &d.Reason, &d.ExitCode, &d.LogSize, &d.StartedAt, &d.FinishedAt,
		&d.Environment, &d.DeployState)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, domain.Errorf(domain.ENotFound, "job %s of run %s not found", jobID, runID)
	}
	if err != nil {
		return d, fmt.Errorf("get job: %w", err)
	}
	rows, err := s.pool.Query(ctx, jobAttemptsSQL, jobID)
	if err != nil {
		return d, fmt.Errorf("job attempts: %w", err)
	}
	d.Attempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := row.Scan(&a.Generation, &a.RunnerID, &a.RunnerName, &a.StartedAt, &a.EndedAt, &a.Outcome,
			&a.Reason, &a.ExitCode, &a.LogSize)
		return a, err
	})
	return d, err
}

// setOutputsSQL merges outputs $2 into job $1's, and answers how many
// names and bytes (names and values) they hold then.
const setOutputsSQL = `
UPDATE jobs SET outputs = coalesce(outputs, '{}'::jsonb) || $2::jsonb WHERE id = $1
RETURNING (SELECT count(*) FROM jsonb_object_keys(outputs)),
          (SELECT coalesce(sum(octet_length(key) + octet_length(value)), 0) FROM jsonb_each_text(outputs))`

// SetOutputs sets the current attempt's job outputs (a name sent again
// replaces its value), read by dependants as needs.<job>.outputs; the
// outputs of all calls together stay within the protocol's limits.
func (s *Store) SetOutputs(ctx context.Context, runnerID, jobID string, l domain.Lease, outputs map[string]string) error {
	return s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		var names, size int64
		if err := tx.QueryRow(ctx, setOutputsSQL, job.ID, outputs).Scan(&names, &size); err != nil {
			return fmt.Errorf("set outputs: %w", err)
		}
		if names > domain.MaxJobOutputs || size > domain.MaxJobOutputBytes {
			return domain.Errorf(domain.ETooLarge, "the job's outputs would hold %d names and %d bytes, over the limits of %d and %d",
				names, size, domain.MaxJobOutputs, domain.MaxJobOutputBytes)
		}
		return nil
	})
}
