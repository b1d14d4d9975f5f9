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
	Name            string
	Generation      int
	Needs           []string
	Spec            json.RawMessage
	LogSize         int64
	CancelRequested bool // the job's or its run's
}

// withLease is THE lease check. Every runner side effect on a job goes
// through it: it locks the job row, checks the whole tuple against it — path
// job, token's runner, run, runner, lease ID, generation, RUNNING, unexpired
// by the database clock, runner not revoked — and runs fn in the same
// transaction, so no call can act on a lease that stopped being current
// between the check and the write. If fn fails, nothing is written.
func (s *Store) withLease(ctx context.Context, runnerID, pathJobID string, l domain.Lease,
	fn func(tx pgx.Tx, job *LeasedJob) error) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.JobID != pathJobID {
		return domain.Errorf(domain.ELeaseMismatch, "lease.job_id %q does not match the job %q in the path", l.JobID, pathJobID)
	}
	if l.RunnerID != runnerID {
		return domain.Errorf(domain.ELeaseMismatch, "lease.runner_id is not the runner this token belongs to")
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		job, err := lockLease(ctx, tx, l)
		if err != nil {
			return err
		}
		return fn(tx, job)
	})
}

// lockLease locks the job row and classifies the tuple. The order of checks
// decides which code a stale runner hears; any of them means "stop".
func lockLease(ctx context.Context, tx pgx.Tx, l domain.Lease) (*LeasedJob, error) {
	var (
		job                        LeasedJob
		state                      string
		curRunner, curLease        *string
		expired, revoked, runnerOK bool
	)
	err := tx.QueryRow(ctx, `
		SELECT j.id, j.run_id, r.project_id, j.name, j.generation, j.needs, j.spec, j.log_size,
		       j.cancel_requested OR r.cancel_requested,
		       j.state, j.runner_id, j.lease_id::text,
		       coalesce(j.lease_expires_at <= now(), true),
		       coalesce(ru.revoked_at IS NOT NULL, true), ru.id IS NOT NULL
		FROM jobs j
		JOIN runs r ON r.id = j.run_id
		LEFT JOIN runners ru ON ru.id = $2
		WHERE j.id = $1
		FOR UPDATE OF j`,
		l.JobID, l.RunnerID).Scan(
		&job.ID, &job.RunID, &job.ProjectID, &job.Name, &job.Generation, &job.Needs, &job.Spec, &job.LogSize,
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
