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

// staleFromSQL is the FROM and WHERE of the deployments let through
// under rules no longer their environment's, not started: written once,
// joined to the statements below at compile time (as leaseMatchSQL).
const staleFromSQL = `
FROM jobs j LEFT JOIN environments e ON e.project_id = j.project_id AND e.name = j.environment
WHERE j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED') AND j.deploy_rules_at IS DISTINCT FROM e.updated_at`

// staleDeploysSQL is run $1's stale deployments, locked, but for those
// another transaction holds (a claim, a group's release: they lock a job
// before its run, which is locked here first).
const staleDeploysSQL = `
SELECT j.id, j.state, j.project_id, coalesce(j.concurrency_group, ''), j.environment,
       coalesce((SELECT r.git_ref FROM runs r WHERE r.id = j.run_id), ''),
       coalesce((SELECT d.url FROM deployments d WHERE d.job_id = j.id ORDER BY d.id DESC LIMIT 1), '')` +
	staleFromSQL + ` AND j.run_id = $1
ORDER BY j.id FOR NO KEY UPDATE OF j SKIP LOCKED`

// staleCountSQL counts run $1's stale deployments, held or not.
const staleCountSQL = `SELECT count(*)` + staleFromSQL + ` AND j.run_id = $1`

// staleAnySQL finds a stale deployment (for nextSweepSQL).
const staleAnySQL = `SELECT 1` + staleFromSQL

// staleRunsSQL is up to $3 runs with stale deployments, oldest first (run
// IDs are time-ordered): of environment $2 of project $1, or of any when
// $1 is empty.
const staleRunsSQL = `SELECT DISTINCT j.run_id` + staleFromSQL + `
  AND ($1 = '' OR j.project_id = $1 AND j.environment = $2)
ORDER BY j.run_id LIMIT $3`

// restampSQL lets job $1 through again, unchanged, under the rules of
// time $2: where it stands in its group stays.
const restampSQL = `UPDATE jobs SET deploy_rules_at = $2 WHERE id = $1 AND deploy_state = 'approved'`

// regateSQL sends jobs $1 back to the gate: pending, undecided, out of
// their job groups, so that advanceRun gates them (and decides their
// condition and group) as when their needs ended.
const regateSQL = `
UPDATE jobs SET state = 'PENDING', deploy_state = NULL, deploy_rules_at = NULL, decided = false, reason = NULL,
       concurrency_group = NULL, concurrency_waiting = false
WHERE id = ANY ($1) AND state IN ('PENDING', 'QUEUED') AND deploy_state = 'approved'`

// regateBudget bounds the time a change of rules, or a sweeper pass,
// spends gating deployments again: the rest is left to the sweeper's next
// pass (the claim's fence holds them meanwhile).
const regateBudget = 5 * time.Second

// regateNow is how many runs a change of rules gates again at the most
// (within regateBudget).
const regateNow = 1000

// errRegateBusy: a deployment to gate again was held by another
// transaction.
var errRegateBusy = errors.New("a deployment to gate again is held by a runner's call")

// RegateStale gates again the deployments whose rules changed since they
// were let through, of environment env of projectID (or of every project
// when projectID is empty), a run at a time, oldest first, at most limit
// runs and for regateBudget; a run whose jobs runners' calls keep holding,
// or that fails, is left for the next pass (its jobs are not claimed
// meanwhile). It returns the runs gated again, and the errors met.
func (s *Store) RegateStale(ctx context.Context, projectID, env string, limit int) (int, error) {
	rows, err := s.pool.Query(ctx, staleRunsSQL, projectID, env, limit)
	if err != nil {
		return 0, fmt.Errorf("deployments to gate again: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("deployments to gate again: %w", err)
	}
	done, until := 0, time.Now().Add(regateBudget)
	var errs []error
	for _, runID := range runs {
		if time.Now().After(until) {
			break
		}
		left, err := s.regateHeld(ctx, runID)
		if errors.Is(err, errRegateBusy) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", runID, err))
			continue
		}
		done++
		_, _ = s.failFast(ctx, runID) // a refused combination fails its matrix as a failure would
		_ = s.afterRun(ctx, runID)    // the run may have ended: its group goes on
		for _, g := range left {
			_ = s.settleJobGroup(ctx, g.project, g.group) // the next of the group goes on (else the sweeper settles it)
		}
	}
	if done > 0 {
		s.signalQueued()
	}
	return done, errors.Join(errs...)
}

// regateHeld is regateRun in a transaction, tried again while runners'
// calls hold the run's jobs (each holds one for a statement).
func (s *Store) regateHeld(ctx context.Context, runID string) ([]jobGroup, error) {
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
	return left, err
}

// jobGroup names a job group.
type jobGroup struct{ project, group string }

// regateRun gates again run runID's stale deployments under their
// environments' rules as they are now: one they let through unchanged
// (no reviewers, its ref allowed) keeps its place, under the new rules'
// time; the others go back to the gate (refused, or waiting for a
// review). It returns the job groups those left.
func regateRun(ctx context.Context, tx pgx.Tx, runID string) ([]jobGroup, error) {
	if _, err := tx.Exec(ctx, lockRunSQL, runID); err != nil {
		return nil, fmt.Errorf("lock run: %w", err)
	}
	rows, err := tx.Query(ctx, staleDeploysSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("lock deployments: %w", err)
	}
	type stale struct{ id, state, project, group, env, ref, url string }
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stale, error) {
		var j stale
		return j, row.Scan(&j.id, &j.state, &j.project, &j.group, &j.env, &j.ref, &j.url)
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
	var back []string
	var groups []jobGroup
	for _, j := range jobs {
		var rules Environment
		var at *time.Time
		err := tx.QueryRow(ctx, environmentRulesSQL, j.project, j.env).Scan(&rules.ReviewerRole, &rules.AllowedRefs, &rules.PreventSelfReview, &at)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read environment: %w", err)
		}
		if rules.ReviewerRole == "" && refAllowed(rules.AllowedRefs, j.ref) {
			if _, err := tx.Exec(ctx, restampSQL, j.id, at); err != nil {
				return nil, fmt.Errorf("let a deployment through again: %w", err)
			}
			if j.state == "QUEUED" {
				// Claimable again with no change of state: idle runners
				// rest on a hint read while it was fenced.
				noteQueued(tx)
			}
			if _, err := tx.Exec(ctx, insertDeploymentSQL, j.id, j.env, j.url, "automatic", ""); err != nil {
				return nil, fmt.Errorf("record a deployment: %w", err)
			}
			continue
		}
		back = append(back, j.id)
		if j.group != "" {
			groups = append(groups, jobGroup{j.project, j.group})
		}
	}
	if len(back) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, regateSQL, back); err != nil {
		return nil, fmt.Errorf("gate deployments again: %w", err)
	}
	return groups, advanceRun(ctx, tx, runID)
}
