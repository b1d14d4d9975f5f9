package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Deployments let through under rules that are no longer their
// environment's: a deployment (a job naming an environment) is let
// through by the gate or a review under the rules of one time
// (jobs.deploy_rules_at, environments.updated_at then), and a claim takes
// it only while those are still the environment's rules (claimSQL's
// fence). One whose rules changed since, not started, is gated again from
// the start under the rules as they are (refused, waiting for a review,
// or let through again): just after the change commits, by the sweeper's
// passes for what that left (the change notes the sweeper), and when a
// retry would put one back in the queue (finishAttempt).

// staleDeploysSQL is the deployments of run $1 let through under rules no
// longer their environment's, not started; locked, but for those another
// transaction holds (a claim, a group's release: they lock a job before
// its run, which is locked here first).
const staleDeploysSQL = `
SELECT j.id, j.project_id, coalesce(j.concurrency_group, '') FROM jobs j
LEFT JOIN environments e ON e.project_id = j.project_id AND e.name = j.environment
WHERE j.run_id = $1 AND j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED')
  AND j.deploy_rules_at IS DISTINCT FROM e.updated_at
ORDER BY j.id FOR NO KEY UPDATE OF j SKIP LOCKED`

// staleAnySQL finds a deployment let through under rules no longer its
// environment's, not started (for nextSweepSQL).
const staleAnySQL = `
SELECT 1 FROM jobs j LEFT JOIN environments e ON e.project_id = j.project_id AND e.name = j.environment
WHERE j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED') AND j.deploy_rules_at IS DISTINCT FROM e.updated_at`

// staleRunsSQL is up to $3 runs with such deployments: of environment $2
// of project $1, or of any when $1 is empty.
const staleRunsSQL = `
SELECT DISTINCT j.run_id FROM jobs j
LEFT JOIN environments e ON e.project_id = j.project_id AND e.name = j.environment
WHERE j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED')
  AND ($1 = '' OR j.project_id = $1 AND j.environment = $2)
  AND j.deploy_rules_at IS DISTINCT FROM e.updated_at
LIMIT $3`

// staleCountSQL counts run $1's deployments staleDeploysSQL would lock.
const staleCountSQL = `
SELECT count(*) FROM jobs j LEFT JOIN environments e ON e.project_id = j.project_id AND e.name = j.environment
WHERE j.run_id = $1 AND j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED')
  AND j.deploy_rules_at IS DISTINCT FROM e.updated_at`

// regateSQL sends jobs $1 back to the gate: pending, undecided, out of
// their job groups, so that advanceRun gates them (and decides their
// condition and group) as when their needs ended.
const regateSQL = `
UPDATE jobs SET state = 'PENDING', deploy_state = NULL, deploy_rules_at = NULL, decided = false, reason = NULL,
       concurrency_group = NULL, concurrency_waiting = false
WHERE id = ANY ($1) AND state IN ('PENDING', 'QUEUED') AND deploy_state = 'approved'`

// regateNow is how many runs a change of rules gates again at once; the
// sweeper does the rest.
const regateNow = 1000

// errRegateBusy: a deployment to gate again was held by another
// transaction.
var errRegateBusy = errors.New("a deployment to gate again is held by a runner's call")

// RegateStale gates again the deployments whose rules changed since they
// were let through, of environment env of projectID (or of every project
// when projectID is empty), a run at a time, at most limit runs; a run
// whose jobs runners' calls keep holding is left for the next pass (its
// jobs are not claimed meanwhile). It returns the runs gated again.
func (s *Store) RegateStale(ctx context.Context, projectID, env string, limit int) (int, error) {
	rows, err := s.pool.Query(ctx, staleRunsSQL, projectID, env, limit)
	if err != nil {
		return 0, fmt.Errorf("deployments to gate again: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("deployments to gate again: %w", err)
	}
	done := 0
	for _, runID := range runs {
		var left []jobGroup
		err := errRegateBusy
		for try := 0; try < 25 && errors.Is(err, errRegateBusy); try++ {
			if try > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			err = s.inTx(ctx, func(tx pgx.Tx) error {
				var err error
				left, err = regateRun(ctx, tx, runID)
				return err
			})
		}
		if errors.Is(err, errRegateBusy) {
			continue
		}
		if err != nil {
			return done, err
		}
		done++
		_, _ = s.failFast(ctx, runID) // a refused combination fails its matrix as a failure would
		_ = s.afterRun(ctx, runID)    // the run may have ended: its group goes on
		for _, g := range left {
			_ = s.settleJobGroup(ctx, g.project, g.group) // the next of the group goes on (else the sweeper settles it)
		}
	}
	return done, nil
}

// jobGroup names a job group.
type jobGroup struct{ project, group string }

// regateRun sends run runID's stale deployments back to the gate and
// gates them; it returns the job groups they left.
func regateRun(ctx context.Context, tx pgx.Tx, runID string) ([]jobGroup, error) {
	if _, err := tx.Exec(ctx, lockRunSQL, runID); err != nil {
		return nil, fmt.Errorf("lock run: %w", err)
	}
	rows, err := tx.Query(ctx, staleDeploysSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("lock deployments: %w", err)
	}
	type stale struct{ id, project, group string }
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stale, error) {
		var j stale
		return j, row.Scan(&j.id, &j.project, &j.group)
	})
	if err != nil {
		return nil, fmt.Errorf("lock deployments: %w", err)
	}
	var all int
	if err := tx.QueryRow(ctx, staleCountSQL, runID).Scan(&all); err != nil {
		return nil, fmt.Errorf("count deployments: %w", err)
	}
	if all > len(jobs) {
		return nil, errRegateBusy
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	ids, groups := make([]string, 0, len(jobs)), []jobGroup{}
	for _, j := range jobs {
		ids = append(ids, j.id)
		if j.group != "" {
			groups = append(groups, jobGroup{j.project, j.group})
		}
	}
	if _, err := tx.Exec(ctx, regateSQL, ids); err != nil {
		return nil, fmt.Errorf("gate deployments again: %w", err)
	}
	return groups, advanceRun(ctx, tx, runID)
}
