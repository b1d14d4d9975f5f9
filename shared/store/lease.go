package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// LeasedJob is the job row as the lease check saw it, locked for the rest of
// the transaction.
type LeasedJob struct {
	ID              string
	RunID           string
	ProjectID       string
	Trusted         bool // the run's trust tier: the blobs and caches it may touch
	Name            string
	Generation      int
	Needs           []string
	Spec            json.RawMessage
	CancelRequested bool // the job's or its run's
}

// withLease is THE lease check. Every runner side effect on a job goes
// through it: it locks the job row, checks the whole tuple against it — path
// job, token's runner, run, runner, lease ID, generation, RUNNING, unexpired
// by the database clock, runner not revoked — and runs fn in the same
// transaction, so no call can act on a lease that stopped being current
// between the check and the write. If fn fails, nothing is written.
//
// The two hottest routes, heartbeat and log append, first try a fast path:
// one statement that checks the same whole tuple (leaseMatchSQL) under a
// lock on the same row and writes, and only when it matches nothing do they
// come here to find out why (or to handle the unusual case, such as a
// resent log range). Row locks are what keep the fast paths sound: a log
// append holds FOR KEY SHARE on the job row until it commits, and every
// transition that ends a lease (complete, sweep, cancel, claim) first takes
// the row FOR UPDATE, which waits for it; so a write is either committed
// before the lease ends or sees it ended. Code that ends a lease must keep
// taking FOR UPDATE first.
func (s *Store) withLease(ctx context.Context, runnerID, pathJobID string, l domain.Lease,
	fn func(tx pgx.Tx, job *LeasedJob) error) error {
	if err := checkTuple(runnerID, pathJobID, l); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		job, err := lockLease(ctx, tx, l)
		if err != nil {
			return err
		}
		return fn(tx, job)
	})
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

// checkTuple is the part of the lease check that needs no database: the
// tuple is well formed, names the job in the path and the token's runner.
func checkTuple(runnerID, pathJobID string, l domain.Lease) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.JobID != pathJobID {
		return domain.Errorf(domain.ELeaseMismatch, "lease.job_id %q does not match the job %q in the path", l.JobID, pathJobID)
	}
	if l.RunnerID != runnerID {
		return domain.Errorf(domain.ELeaseMismatch, "lease.runner_id is not the runner this token belongs to")
	}
	return nil
}

// leaseMatchSQL is the whole lease check as a condition on the job row j,
// for the single-statement fast paths: $1 job, $2 run, $3 runner, $4 lease
// ID, $5 generation; RUNNING, unexpired by the database clock. It must say
// what lockLease checks; "runner not revoked" is implied, because
// RevokeRunner ends the runner's leases in the transaction that revokes it
// (after taking the job rows FOR UPDATE), so a revoked runner holds no
// unexpired lease. The token's check at the door refuses it anyway.
//
// The row is found by its primary key and nothing else: the rest of the
// tuple is compared as one row with IS NOT DISTINCT FROM, which no index
// serves. Written as plain equalities, generic plans made on a young
// table's statistics walked the run's jobs (index on run_id) or every
// running job (the sweeper's index) to find one row.
const leaseMatchSQL = `j.id = $1
    AND (j.run_id, j.runner_id, j.lease_id::text, j.generation, j.state) IS NOT DISTINCT FROM ($2, $3, $4, $5::int, 'RUNNING')
    AND j.lease_expires_at > now()`

// logEndSQL is the end of the current attempt's log for the job row j (its
// generation j.generation): log chunks are contiguous and append-only, so it
// is the end of the last chunk (one backward step of the primary key).
// jobs.log_size is a copy for display, refreshed by heartbeats and set
// exactly when the attempt ends. Like leaseMatchSQL it is a fragment,
// joined to the statements that use it at compile time.
const logEndSQL = `coalesce((SELECT c.start_offset + length(c.data) FROM log_chunks c
	    WHERE c.job_id = j.id AND c.generation = j.generation
	    ORDER BY c.start_offset DESC LIMIT 1), 0)`

// cancelAskedSQL is whether job j (of run r) is asked to stop: the job
// itself, or its run, unless the job's condition calls always() or
// cancelled(), which run after their run's cancel (the jobs running at
// the cancel were asked one by one); and every job of a trusted run whose
// snapshot or inputs were given with an API token since revoked
// (markRevokedRunsSQL), which its runner hears on its next heartbeat.
const cancelAskedSQL = `(j.cancel_requested OR (r.cancel_requested AND NOT j.survives_cancel) OR (r.token_revoked AND r.trusted))`

// lockLeaseSQL locks job $1 and reads what lockLease classifies, with
// runner $2's row (absent or revoked: the lease is refused).
const lockLeaseSQL = `
SELECT j.id, j.run_id, r.project_id, r.trusted, j.name, j.generation, j.needs, j.spec,
       ` + cancelAskedSQL + `,
       j.state, j.runner_id, j.lease_id::text,
       coalesce(j.lease_expires_at <= now(), true),
       coalesce(ru.revoked_at IS NOT NULL, true), ru.id IS NOT NULL
FROM jobs j
JOIN runs r ON r.id = j.run_id
LEFT JOIN runners ru ON ru.id = $2
WHERE j.id = $1
FOR UPDATE OF j`

// lockLease locks the job row and classifies the tuple. The order of checks
// decides which code a stale runner hears; any of them means "stop".
func lockLease(ctx context.Context, tx pgx.Tx, l domain.Lease) (*LeasedJob, error) {
	var (
		job                        LeasedJob
		state                      string
		curRunner, curLease        *string
		expired, revoked, runnerOK bool
	)
	err := tx.QueryRow(ctx, lockLeaseSQL, l.JobID, l.RunnerID).Scan(
		&job.ID, &job.RunID, &job.ProjectID, &job.Trusted, &job.Name, &job.Generation, &job.Needs, &job.Spec,
		&job.CancelRequested, &state, &curRunner, &curLease, &expired, &revoked, &runnerOK)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, domain.Errorf(domain.ELeaseMismatch, "job %s has no lease matching this one", l.JobID)
	}
	if err != nil {
		return nil, fmt.Errorf("lock job %s: %w", l.JobID, err)
	}
	switch {
	case !runnerOK || revoked:
		// Revocation is re-checked here, under the row lock, not only at
		// authentication: a runner revoked mid-request writes nothing.
		return nil, domain.Errorf(domain.EUnauthorized, "runner is revoked")
	case job.RunID != l.RunID || curRunner == nil || *curRunner != l.RunnerID ||
		curLease == nil || *curLease != l.LeaseID || job.Generation != l.Generation:
		return nil, domain.Errorf(domain.ELeaseMismatch, "lease is not the current lease of job %s", l.JobID)
	case domain.JobTerminal(state):
		return nil, domain.Errorf(domain.EJobFinished, "job %s is already %s", l.JobID, state)
	case state != domain.JobRunning:
		return nil, domain.Errorf(domain.ELeaseMismatch, "job %s is %s, not running", l.JobID, state)
	case expired:
		return nil, domain.Errorf(domain.ELeaseExpired, "lease of job %s has expired", l.JobID)
	}
	return &job, nil
}
