package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// An environment's rules changed: the jobs they let deploy are gated
// again, under the new rules, just after the change commits (an admin who
// locks production down during an incident stops the deployments queued
// before). A job not started whose ref the rules no longer allow fails;
// where the review grew stricter (reviewers where there were none,
// admins where writers were, self-review prevented), it waits for a
// review again, even one approved under the old rules. A running one has
// its secrets already (cancel its run to stop it), but is not retried
// automatically under the old approval.

// stricterReview reports whether rules now asks more of a deployment's
// review than was did.
func stricterReview(was, rules Environment) bool {
	switch {
	case rules.ReviewerRole == "":
		return false
	case was.ReviewerRole == "", rules.ReviewerRole == RoleAdmin && was.ReviewerRole != RoleAdmin:
		return true
	}
	return rules.PreventSelfReview && !was.PreventSelfReview
}

// regateRunsSQL is the runs of project $1 with jobs let deploy to
// environment $2 that have not ended.
const regateRunsSQL = `
SELECT DISTINCT run_id FROM jobs
WHERE project_id = $1 AND environment = $2 AND deploy_state = 'approved' AND state IN ('PENDING', 'QUEUED', 'RUNNING')
ORDER BY run_id`

// regateJobsSQL reads run $1's jobs let deploy to $2 that have not
// ended, without a lock, with the run's ref, the URL the job's last
// deployment showed, its state and its job group: those the new rules
// change are locked next (regateLockSQL).
const regateJobsSQL = `
SELECT j.id, coalesce(r.git_ref, ''),
       coalesce((SELECT d.url FROM deployments d WHERE d.job_id = j.id ORDER BY d.id DESC LIMIT 1), ''),
       j.state, coalesce(j.concurrency_group, '')
FROM jobs j JOIN runs r ON r.id = j.run_id
WHERE j.run_id = $1 AND j.environment = $2 AND j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED', 'RUNNING')
ORDER BY j.id`

// regateLockSQL locks jobs $1 while still as read ($2, their states),
// skipping those another transaction holds (a claim, a completion, a
// group's release: they lock a job before its run, and the run is locked
// here first). NO KEY: a log append's FOR KEY SHARE does not hold it up.
const regateLockSQL = `
SELECT j.id FROM jobs j JOIN unnest($1::text[], $2::text[]) AS w (id, state) ON w.id = j.id
WHERE j.deploy_state = 'approved' AND j.state = w.state
ORDER BY j.id FOR NO KEY UPDATE OF j SKIP LOCKED`

// regateWaitSQL holds job $1, queued or not, for a review of its
// deployment (reason $2), undecided and out of its job group (which it
// would hold while it waits): once approved, advanceRun decides it again
// (its condition, its group) and queues it, as after a first review.
const regateWaitSQL = `
UPDATE jobs SET state = 'PENDING', deploy_state = 'waiting', decided = false, reason = $2,
       concurrency_group = NULL, concurrency_waiting = false
WHERE id = $1 AND state IN ('PENDING', 'QUEUED')`

// noRetrySQL ends running job $1's automatic retries: a next attempt
// would be a deployment the new rules did not let through.
const noRetrySQL = `UPDATE jobs SET retry_failed = 0, retry_lease_lost = 0 WHERE id = $1 AND state = 'RUNNING'`

// errRegateBusy: a job to gate again was held by another transaction.
var errRegateBusy = errors.New("a deployment to gate again is held by a runner's call")

// regated is what gating a run again changed, to settle after its commit.
type regated struct {
	refused bool     // a job refused: fail fast, settle the run's groups
	groups  []string // job groups that jobs held for a review left
}

// regateRuns gates again the jobs of projectID's runs let deploy to env
// under rules was, each run in a transaction of its own, tried again
// while runners' calls hold its jobs (each holds one for a statement).
func (s *Store) regateRuns(ctx context.Context, projectID, env string, runs []string, was Environment) error {
	var busy []string
	for _, runID := range runs {
		var out regated
		err := errRegateBusy
		for try := 0; try < 50 && errors.Is(err, errRegateBusy); try++ {
			if try > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			out = regated{}
			err = s.inTx(ctx, func(tx pgx.Tx) error { return regateRun(ctx, tx, projectID, runID, env, was, &out) })
		}
		if errors.Is(err, errRegateBusy) {
			busy = append(busy, runID)
			continue
		}
		if err != nil {
			return err
		}
		if out.refused {
			_, _ = s.failFast(ctx, runID) // a refused combination fails its matrix as a failure would
			_ = s.afterRun(ctx, runID)    // the run may have ended: its group goes on
		}
		for _, g := range out.groups {
			_ = s.settleJobGroup(ctx, projectID, g) // the next of the group goes on (else the sweeper settles it)
		}
	}
	if len(busy) > 0 {
		return domain.Errorf(domain.EUnavailable, "environment %s is saved, but the deployments of runs %s could not be gated "+
			"again (runners' calls held them): cancel those runs if they must not deploy", env, strings.Join(busy, ", "))
	}
	return nil
}

// regateRun gates again run runID's jobs let deploy to env, under its
// rules as they are now (review grown stricter since was), noting in out
// what to settle.
func regateRun(ctx context.Context, tx pgx.Tx, projectID, runID, env string, was Environment, out *regated) error {
	if _, err := tx.Exec(ctx, lockRunSQL, runID); err != nil {
		return fmt.Errorf("lock run: %w", err)
	}
	var rules Environment
	err := tx.QueryRow(ctx, environmentRulesSQL, projectID, env).Scan(&rules.ReviewerRole, &rules.AllowedRefs, &rules.PreventSelfReview)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted since: no rules
	}
	if err != nil {
		return fmt.Errorf("read environment: %w", err)
	}
	rows, err := tx.Query(ctx, regateJobsSQL, runID, env)
	if err != nil {
		return fmt.Errorf("read deployments: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (deploy, error) {
		var d deploy
		return d, row.Scan(&d.id, &d.ref, &d.url, &d.state, &d.group)
	})
	if err != nil {
		return fmt.Errorf("read deployments: %w", err)
	}
	review := stricterReview(was, rules)
	jobs = slices.DeleteFunc(jobs, func(d deploy) bool { return refAllowed(rules.AllowedRefs, d.ref) && !review })
	if len(jobs) == 0 {
		return nil // the rules let every one through as before
	}
	if err := lockRegated(ctx, tx, jobs); err != nil {
		return err
	}
	b, advance := &pgx.Batch{}, false
	for _, j := range jobs {
		switch {
		case j.state == "RUNNING":
			b.Queue(noRetrySQL, j.id)
		case !refAllowed(rules.AllowedRefs, j.ref):
			reason := fmt.Sprintf("environment %s no longer allows %s to deploy (allowed: %s)", env, refOrNone(j.ref), strings.Join(rules.AllowedRefs, ", "))
			b.Queue(insertDeploymentSQL, j.id, env, j.url, "refused", reason)
			b.Queue(rejectDeploySQL, j.id, domain.Truncate(reason, 300))
			out.refused, advance = true, true
		default: // the review grew stricter
			b.Queue(insertDeploymentSQL, j.id, env, j.url, "waiting", "")
			b.Queue(regateWaitSQL, j.id, "waiting for a review to deploy to "+env+" (its rules changed)")
			advance = true
			if j.group != "" {
				out.groups = append(out.groups, j.group)
			}
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("gate deployments again: %w", err)
	}
	if !advance {
		return nil
	}
	return advanceRun(ctx, tx, runID) // a refused job's dependants are skipped
}

// deploy is a job the re-gate reads.
type deploy struct{ id, ref, url, state, group string }

// lockRegated locks the jobs to change, as read; errRegateBusy when one
// is held or has moved on.
func lockRegated(ctx context.Context, tx pgx.Tx, jobs []deploy) error {
	ids, states := make([]string, len(jobs)), make([]string, len(jobs))
	for i, j := range jobs {
		ids[i], states[i] = j.id, j.state
	}
	rows, err := tx.Query(ctx, regateLockSQL, ids, states)
	if err != nil {
		return fmt.Errorf("lock deployments: %w", err)
	}
	locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("lock deployments: %w", err)
	}
	if len(locked) < len(jobs) {
		return errRegateBusy
	}
	return nil
}
