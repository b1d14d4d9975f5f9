package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// expiredLeaseSQL locks one job whose lease expired by the database
// clock (oldest expiry first), skipping jobs another transaction holds.
const expiredLeaseSQL = expiredLeaseWaitSQL + ` SKIP LOCKED`

// expiredLeaseWaitSQL is the same, waiting for a job another transaction
// holds; PostgreSQL re-checks the row once the holder is done.
const expiredLeaseWaitSQL = `
SELECT id, run_id, generation FROM jobs
WHERE state = 'RUNNING' AND lease_expires_at <= now() AND id <> ALL ($1::text[])
ORDER BY lease_expires_at
LIMIT 1
FOR UPDATE`

// sweepLockWait bounds how long a sweep waits for a job row that another
// transaction holds (a late runner call, normally milliseconds).
const sweepLockWait = 2 * time.Second

var errHeldTooLong = fmt.Errorf("sweep: an expired job's row stayed locked past %s; the next sweep takes it", sweepLockWait)

// SweepResult counts what one sweep did.
type SweepResult struct {
	Aborted  int // jobs made ABORTED with reason lease_expired
	Requeued int // jobs re-queued as a new generation by their retry policy
}

// Sweep ends every job whose lease expired by the database clock. Recovery
// refuses to guess: the job's steps may have had side effects, so it becomes
// ABORTED (reason lease_expired) unless the job declared an explicit
// lease-lost retry policy, in which case it is re-queued and its next claim
// fences the old lease by generation.
//
// Each job is handled in its own short transaction under a SKIP LOCKED row
// lock, so sweeps may run concurrently with each other and with late runner
// calls: whoever holds the row decides, and the other sees the result.
// Rows skipped because a late runner call held them are taken once more,
// waiting, at the end: a rejected runner call ends nothing, so skipping
// would leave its job RUNNING until the next sweep.
func (s *Store) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	// A job whose ending fails is passed over for the rest of this sweep
	// (and said), so that one cannot keep every other lease from ending.
	failed := []string{}
	var errs []error
	query := expiredLeaseSQL
	for {
		var state, jobID, runID string
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			// Waiting is bounded by a context, not lock_timeout: a SET would
			// pin the session to its connection behind RDS Proxy.
			qctx, cancel := ctx, context.CancelFunc(func() {})
			if query == expiredLeaseWaitSQL {
				qctx, cancel = context.WithTimeout(ctx, sweepLockWait)
			}
			var generation int
			err := tx.QueryRow(qctx, query, failed).Scan(&jobID, &runID, &generation)
			waited := qctx.Err() != nil && ctx.Err() == nil
			cancel()
			if waited {
				return errHeldTooLong
			}
			if err != nil {
				return err
			}
			state, err = finishAttempt(ctx, tx, jobID, runID, generation, domain.JobAborted, domain.ReasonLeaseExpired, nil)
			return err
		})
		if errors.Is(err, errHeldTooLong) {
			// The rest of the sweep goes on; the error keeps the sweeper's
			// notes, so the next pass takes the job.
			errs = append(errs, err)
			break
		}
		if errors.Is(err, pgx.ErrNoRows) {
			if query == expiredLeaseSQL {
				query = expiredLeaseWaitSQL
				continue
			}
			break
		}
		if err != nil && (jobID == "" || ctx.Err() != nil) {
			return res, errors.Join(append(errs, fmt.Errorf("sweep: %w", err))...)
		}
		switch {
		case err != nil:
			failed = append(failed, jobID)
			errs = append(errs, fmt.Errorf("sweep job %s: %w", jobID, err))
		case state == domain.JobQueued:
			res.Requeued++
		default:
			res.Aborted++
			if _, err := s.failFast(ctx, runID); err != nil {
				errs = append(errs, fmt.Errorf("sweep: fail-fast of run %s: %w", runID, err))
			}
			if err := s.afterRun(ctx, runID); err != nil {
				errs = append(errs, fmt.Errorf("sweep: concurrency group of run %s: %w", runID, err))
			}
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	if res.Requeued > 0 {
		s.signalQueued()
	}
	errs = append(errs, s.releaseStuckGroups(ctx), s.settleWaitingJobGroups(ctx))
	return res, errors.Join(errs...)
}
