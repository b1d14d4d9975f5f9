package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// heartbeatSQL is the heartbeat's fast path: the whole lease check and the
// extension in one statement (the UPDATE holds the row until commit). It
// also refreshes the displayed log size from the log itself.
var heartbeatSQL = `
UPDATE jobs j SET lease_expires_at = now() + make_interval(secs => $6),
       log_size = ` + logEndSQL("j.id", "j.generation") + `
FROM runs r
WHERE ` + leaseMatchSQL + ` AND r.id = j.run_id
RETURNING j.lease_expires_at, j.cancel_requested OR r.cancel_requested`

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
		return tx.QueryRow(ctx, `
			UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $2)
			WHERE id = $1 RETURNING lease_expires_at`,
			job.ID, s.limits.LeaseTTL.Seconds()).Scan(&expires)
	})
	return expires, cancel, err
}

// CheckLease runs the lease check alone and returns the locked job as it was.
// Routes that only read (source) use it; it writes nothing.
func (s *Store) CheckLease(ctx context.Context, runnerID, jobID string, l domain.Lease) (*LeasedJob, error) {
	var out *LeasedJob
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		out = job
		return nil
	})
	return out, err
}

// MaxLogChunk is the most bytes one log append may carry.
const MaxLogChunk = 1 << 20

// AppendLog appends data at offset to the current attempt's log.
//
// Per DESIGN.md: an append must start at the current end; resending a range
// that is already stored, byte for byte, is accepted as a no-op so that a
// runner may retry after a lost response; anything else is EOffsetMismatch
// carrying the current end. It returns the log's end after the call.
func (s *Store) AppendLog(ctx context.Context, runnerID, jobID string, l domain.Lease, offset int64, data []byte) (next int64, err error) {
	if offset < 0 {
		return 0, domain.Errorf(domain.EInvalid, "field offset must not be negative")
	}
	if len(data) > MaxLogChunk {
		return 0, domain.Errorf(domain.ETooLarge, "a log append may carry at most %d bytes, got %d", MaxLogChunk, len(data))
	}
	if err := checkTuple(runnerID, jobID, l); err != nil {
		return 0, err
	}
	// The fast path: the common append, at the end, in one statement.
	if len(data) > 0 {
		tag, err := s.pool.Exec(ctx, appendLogSQL, l.JobID, l.RunID, l.RunnerID, l.LeaseID, l.Generation,
			offset, data, int64(len(data)))
		switch {
		case err == nil && tag.RowsAffected() == 1:
			return offset + int64(len(data)), nil
		case err != nil && !isUniqueViolation(err):
			// A unique violation is a concurrent append at the same
			// offset, classified below; anything else is a real failure.
			return 0, fmt.Errorf("append log: %w", err)
		}
	}
	err = s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		// The row is locked FOR UPDATE, so no append is in flight.
		var end int64
		if err := tx.QueryRow(ctx, `SELECT `+logEndSQL("$1", "$2"), job.ID, job.Generation).Scan(&end); err != nil {
			return fmt.Errorf("log end: %w", err)
		}
		n := int64(len(data))
		switch {
		case offset == end:
			if n == 0 {
				next = end
				return nil
			}
			if end+n > s.limits.MaxLogBytes {
				return domain.Errorf(domain.ETooLarge, "job log would exceed the limit of %d bytes", s.limits.MaxLogBytes)
			}
			others, err := s.otherLogs(ctx, tx, job)
			if err != nil {
				return err
			}
			if others+end+n > s.limits.MaxRunLogBytes {
				return domain.Errorf(domain.ETooLarge, "the run's logs would exceed the run limit of %d bytes", s.limits.MaxRunLogBytes)
			}
			// A new budget for the fast path: a share of what the run has left.
			grant := min(logGrant, (s.limits.MaxRunLogBytes-others-end-n)/4)
			if _, err := tx.Exec(ctx, `UPDATE jobs SET log_limit = $2 WHERE id = $1`, job.ID,
				min(s.limits.MaxLogBytes, end+n+grant)); err != nil {
				return fmt.Errorf("log budget: %w", err)
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO log_chunks (job_id, generation, start_offset, data) VALUES ($1, $2, $3, $4)`,
				job.ID, job.Generation, end, data); err != nil {
				return fmt.Errorf("insert log chunk: %w", err)
			}
			next = end + n
			return nil
		case offset+n <= end:
			stored, err := readLog(ctx, tx, job.ID, job.Generation, offset, n)
			if err != nil {
				return err
			}
			if bytes.Equal(stored, data) {
				next = end // an identical resend: nothing to do
				return nil
			}
		}
		return &domain.Error{Code: domain.EOffsetMismatch, NextOffset: &end,
			Message: fmt.Sprintf("offset %d with %d bytes does not append at the log's end %d nor repeat stored bytes", offset, n, end)}
	})
	return next, err
}

// logGrant is the most log a job may append on the fast path before the
// slow path looks at its run again (see appendLogSQL).
const logGrant = 4 << 20

// otherLogs is the size of the logs of the other jobs of the locked job's
// run: their current attempts' logs as they stand (ended ones exact).
func (s *Store) otherLogs(ctx context.Context, tx pgx.Tx, job *LeasedJob) (int64, error) {
	var others int64
	err := tx.QueryRow(ctx, `
		SELECT coalesce(sum(CASE WHEN o.state = 'RUNNING' THEN `+logEndSQL("o.id", "o.generation")+` ELSE o.log_size END), 0)
		FROM jobs o WHERE o.run_id = $1 AND o.id <> $2`, job.RunID, job.ID).Scan(&others)
	if err != nil {
		return 0, fmt.Errorf("run log size: %w", err)
	}
	return others, nil
}

// appendLogSQL is the log append's fast path: the whole lease check under
// FOR KEY SHARE of the job row (held until commit; see withLease), and the
// chunk inserted only if it starts at the attempt's current end and stays
// within the job's log budget (jobs.log_limit: at most logGrant past where
// the slow path last checked the attempt's and the run's limits exactly,
// granting each job a quarter of what the run had left, so that jobs of a
// run logging at once can pass the run's limit by little). Two appends racing at one offset cannot both land: the
// second hits the primary key (job, generation, start_offset). It matches
// nothing, and the slow path takes over (with exact limits), for every
// other case.
var appendLogSQL = `
INSERT INTO log_chunks (job_id, generation, start_offset, data)
SELECT j.id, j.generation, $6, $7 FROM jobs j
WHERE ` + leaseMatchSQL + `
  AND ` + logEndSQL("j.id", "j.generation") + ` = $6 AND $6 + $8::bigint <= j.log_limit
FOR KEY SHARE OF j`

// readLog returns the bytes [offset, offset+n) of one attempt's log.
func readLog(ctx context.Context, q pgx.Tx, jobID string, generation int, offset, n int64) ([]byte, error) {
	rows, err := q.Query(ctx, `
		SELECT start_offset, data FROM log_chunks
		WHERE job_id = $1 AND generation = $2
		  AND start_offset < $3::bigint + $4::bigint AND start_offset + length(data) > $3::bigint
		ORDER BY start_offset`, jobID, generation, offset, n)
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	defer rows.Close()
	out := make([]byte, 0, n)
	for rows.Next() {
		var start int64
		var data []byte
		if err := rows.Scan(&start, &data); err != nil {
			return nil, fmt.Errorf("read log: %w", err)
		}
		lo := max(offset-start, 0)
		hi := min(offset+n-start, int64(len(data)))
		out = append(out, data[lo:hi]...)
	}
	return out, rows.Err()
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
	if c.State == domain.JobFailed {
		// Before the transaction: opening secrets may call KMS, and the
		// job row must not stay locked meanwhile.
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
	return c, err
}

// finishAttempt closes the attempt of the locked job's given generation with
// outcome, then either re-queues the job (when its explicit retry policy
// still allows another attempt for this kind of loss) or makes it terminal,
// and advances the run. It returns the job's new state.
func finishAttempt(ctx context.Context, tx pgx.Tx, jobID, runID string, generation int, outcome, reason string, exitCode *int) (string, error) {
	// The attempt row is the lease's record, written as the lease ends.
	if _, err := tx.Exec(ctx, `
		INSERT INTO job_attempts (job_id, generation, runner_id, lease_id, started_at, ended_at,
		                          outcome, reason, exit_code, log_size)
		SELECT id, generation, runner_id, lease_id, started_at, now(), $3, nullif($4, ''), $5, `+logEndSQL("$1", "$2")+`
		FROM jobs WHERE id = $1 AND generation = $2`,
		jobID, generation, outcome, reason, exitCode); err != nil {
		return "", fmt.Errorf("record attempt: %w", err)
	}
	var retry bool
	if err := tx.QueryRow(ctx, `
		SELECT CASE
		         WHEN $2 = 'FAILED'  THEN j.retry_failed
		         WHEN $2 = 'ABORTED' THEN j.retry_lease_lost
		         ELSE 0
		       END > (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id AND a.outcome = $2) - 1
		   AND NOT j.cancel_requested AND NOT r.cancel_requested
		FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id = $1`, jobID, outcome).Scan(&retry); err != nil {
		return "", fmt.Errorf("retry policy: %w", err)
	}
	if retry {
		// The lease columns stay as they were: the old owner's tuple still
		// names this job but the job is not RUNNING, and the next claim
		// moves the generation on, so every call of the old lease is fenced.
		if _, err := tx.Exec(ctx, `
			UPDATE jobs SET state = 'QUEUED', queued_at = now(), reason = nullif($2, ''), exit_code = $3,
			       log_size = (SELECT log_size FROM job_attempts WHERE job_id = $1 AND generation = jobs.generation)
			WHERE id = $1`, jobID, reason, exitCode); err != nil {
			return "", fmt.Errorf("requeue job: %w", err)
		}
		return domain.JobQueued, nil
	}
	if outcome == domain.JobPassed {
		if err := promoteCaches(ctx, tx, jobID, generation); err != nil {
			return "", err
		}
	}
	if _, err := tx.Exec(ctx, `
		UPDATE jobs SET state = $2, finished_at = now(), reason = nullif($3, ''), exit_code = $4,
		       log_size = (SELECT log_size FROM job_attempts WHERE job_id = $1 AND generation = jobs.generation)
		WHERE id = $1`, jobID, outcome, reason, exitCode); err != nil {
		return "", fmt.Errorf("finish job: %w", err)
	}
	if err := advanceRun(ctx, tx, runID); err != nil {
		return "", err
	}
	return outcome, nil
}
