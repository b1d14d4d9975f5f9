package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// An environment's rules changed: the jobs they let deploy that have not
// started are gated again, under the new rules, in the change's
// transaction (an admin who locks production down during an incident
// stops the deployments queued before). A job whose ref the rules no
// longer allow fails; where the review grew stricter (reviewers where
// there were none, admins where writers were, self-review prevented),
// it waits for a review again, even one approved under the old rules.
// Running jobs have their secrets already: cancel their runs to stop
// them.

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
// environment $2 that have not started, in the order runs are locked.
const regateRunsSQL = `
SELECT DISTINCT run_id FROM jobs
WHERE project_id = $1 AND environment = $2 AND deploy_state = 'approved' AND state IN ('PENDING', 'QUEUED')
ORDER BY run_id`

// regateJobsSQL locks run $1's jobs let deploy to $2 that have not
// started (the run is locked first, as advanceRun locks them), with the
// run's ref, the URL the job's last deployment showed and its job group.
const regateJobsSQL = `
SELECT j.id, coalesce(r.git_ref, ''),
       coalesce((SELECT d.url FROM deployments d WHERE d.job_id = j.id ORDER BY d.id DESC LIMIT 1), ''),
       coalesce(j.concurrency_group, '')
FROM jobs j JOIN runs r ON r.id = j.run_id
WHERE j.run_id = $1 AND j.environment = $2 AND j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED')
ORDER BY j.id FOR UPDATE OF j`

// regateWaitSQL holds job $1, queued or not, for a review of its
// deployment (reason $2), undecided and out of its job group (which it
// would hold while it waits): once approved, advanceRun decides it again
// (its condition, its group) and queues it, as after a first review.
const regateWaitSQL = `
UPDATE jobs SET state = 'PENDING', deploy_state = 'waiting', decided = false, reason = $2,
       concurrency_group = NULL, concurrency_waiting = false
WHERE id = $1 AND state IN ('PENDING', 'QUEUED')`

// regated is what regate changed, to settle after the commit: the runs
// whose jobs it refused, and the job groups that jobs held for a review
// left.
type regated struct {
	refused, groups []string
}

// regate gates again, under environment e's rules as just written, the
// jobs of project projectID it let deploy that have not started: refused
// where their ref is no longer allowed, held for a review again when
// review.
func regate(ctx context.Context, tx pgx.Tx, projectID string, e Environment, review bool) (regated, error) {
	var out regated
	rows, err := tx.Query(ctx, regateRunsSQL, projectID, e.Name)
	if err != nil {
		return out, fmt.Errorf("deployments to gate again: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return out, fmt.Errorf("deployments to gate again: %w", err)
	}
	for _, runID := range runs {
		if err := regateRun(ctx, tx, runID, e, review, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// regateRun gates again run runID's jobs let deploy to e, noting in out
// what to settle.
func regateRun(ctx context.Context, tx pgx.Tx, runID string, e Environment, review bool, out *regated) error {
	if _, err := tx.Exec(ctx, lockRunSQL, runID); err != nil {
		return fmt.Errorf("lock run: %w", err)
	}
	rows, err := tx.Query(ctx, regateJobsSQL, runID, e.Name)
	if err != nil {
		return fmt.Errorf("lock deployments: %w", err)
	}
	type deploy struct{ id, ref, url, group string }
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (deploy, error) {
		var h deploy
		return h, row.Scan(&h.id, &h.ref, &h.url, &h.group)
	})
	if err != nil {
		return fmt.Errorf("lock deployments: %w", err)
	}
	refused, held := false, false
	b := &pgx.Batch{}
	for _, j := range jobs {
		switch {
		case !refAllowed(e.AllowedRefs, j.ref):
			reason := fmt.Sprintf("environment %s no longer allows %s to deploy (allowed: %s)", e.Name, refOrNone(j.ref), strings.Join(e.AllowedRefs, ", "))
			b.Queue(insertDeploymentSQL, j.id, e.Name, j.url, "refused", reason)
			b.Queue(rejectDeploySQL, j.id, domain.Truncate(reason, 300))
			refused = true
		case review:
			b.Queue(insertDeploymentSQL, j.id, e.Name, j.url, "waiting", "")
			b.Queue(regateWaitSQL, j.id, "waiting for a review to deploy to "+e.Name+" (its rules changed)")
			held = true
			if j.group != "" {
				out.groups = append(out.groups, j.group)
			}
		}
	}
	if !refused && !held {
		return nil
	}
	if refused {
		out.refused = append(out.refused, runID)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("gate deployments again: %w", err)
	}
	return advanceRun(ctx, tx, runID) // a refused job's dependants are skipped
}
