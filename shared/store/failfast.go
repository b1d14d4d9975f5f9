package store

import (
	"context"
	"fmt"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/jackc/pgx/v5"
)

// fail-fast (GitHub's default for a matrix): when a combination fails for
// good (FAILED without continue-on-error, or ABORTED, its retries spent),
// the combinations not yet ended are canceled as a user's cancel would:
// those waiting at once, those running through cancel_requested, which
// their runners hear on the next heartbeat.
//
// It runs in its own transaction after the failing one commits, because
// it must lock the siblings' rows before the run's (Cancel's lock order),
// and the failing transaction already holds its own row: two combinations
// failing at once would otherwise each wait for the other. If the process
// ends between the two, the siblings run to their ends: work is wasted,
// nothing is wrong.

// failFastTargetsSQL locks the open jobs of run $1 in a fail-fast matrix
// one of whose combinations failed, in ID order, with the name of the
// first that failed.
const failFastTargetsSQL = `
SELECT s.id, f.name FROM jobs s
JOIN LATERAL (SELECT f.name FROM jobs f
              WHERE f.run_id = s.run_id AND f.job_group = s.job_group
                AND (f.state = 'ABORTED' OR f.state = 'FAILED' AND NOT f.continue_on_error)
              ORDER BY f.finished_at, f.id LIMIT 1) f ON true
WHERE s.run_id = $1 AND s.fail_fast AND s.state IN ('PENDING', 'QUEUED', 'RUNNING')
ORDER BY s.id`

// lockFailFastSQL locks the queued and running jobs among $1.
const lockFailFastSQL = `SELECT id FROM jobs WHERE id = ANY ($1) AND state IN ('QUEUED', 'RUNNING') ORDER BY id FOR UPDATE`

// failFastWaitingSQL cancels job $1 if it has not started; $2 says why.
const failFastWaitingSQL = `
UPDATE jobs SET state = 'CANCELED', reason = $2, finished_at = now()
WHERE id = $1 AND state IN ('PENDING', 'QUEUED')`

// failFastRunningSQL asks job $1's runner to stop.
const failFastRunningSQL = `UPDATE jobs SET cancel_requested = true WHERE id = $1 AND state = 'RUNNING'`

// failFast cancels the rest of every fail-fast matrix of run runID one of
// whose combinations failed. It returns how many jobs it canceled or asked
// to stop.
func (s *Store) failFast(ctx context.Context, runID string) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, failFastTargetsSQL, runID)
		if err != nil {
			return fmt.Errorf("fail-fast targets: %w", err)
		}
		type target struct{ id, failed string }
		targets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (target, error) {
			var t target
			return t, row.Scan(&t.id, &t.failed)
		})
		if err != nil || len(targets) == 0 {
			return err
		}
		ids := make([]string, len(targets))
		for i, t := range targets {
			ids[i] = t.id
		}
		if _, err := tx.Exec(ctx, lockFailFastSQL, ids); err != nil {
			return fmt.Errorf("lock jobs: %w", err)
		}
		b := &pgx.Batch{}
		b.Queue(lockRunSQL, runID)
		for _, t := range targets {
			b.Queue(failFastWaitingSQL, t.id, domain.Truncate("fail-fast: "+t.failed+" failed", 300))
			b.Queue(failFastRunningSQL, t.id)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("fail-fast: %w", err)
		}
		n = len(targets)
		return advanceRun(ctx, tx, runID)
	})
	return n, err
}
