package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Deployment is one job's deployment to an environment, as the history
// shows it. Decision is how it was let go (automatic, waiting, approved,
// rejected, refused); State is the job's state now.
type Deployment struct {
	ID          int64      `json:"id"`
	Environment string     `json:"environment"`
	RunID       string     `json:"run_id"`
	RunNumber   int64      `json:"run_number"`
	JobID       string     `json:"job_id"`
	JobName     string     `json:"job_name"`
	Ref         string     `json:"ref"`
	SHA         string     `json:"sha"`
	URL         string     `json:"url,omitempty"`
	Decision    string     `json:"decision"`
	Reason      string     `json:"reason,omitempty"`
	DecidedBy   string     `json:"decided_by,omitempty"`
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	State       string     `json:"state"`
	CreatedAt   time.Time  `json:"created_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// deploymentsSQL is a page of project $1's deployments, newest first:
// to environment $2 (empty: all), before ID $3 (0: from the newest), at
// most $4.
const deploymentsSQL = `
SELECT d.id, d.environment, d.run_id, r.number, d.job_id, j.name, d.ref, d.sha, coalesce(d.url, ''), d.decision,
       coalesce(d.reason, ''), coalesce(d.decided_by, ''), d.decided_at, j.state, d.created_at, j.finished_at
FROM deployments d JOIN jobs j ON j.id = d.job_id JOIN runs r ON r.id = d.run_id
WHERE d.project_id = $1 AND ($2 = '' OR d.environment = $2) AND ($3 = 0 OR d.id < $3)
ORDER BY d.id DESC LIMIT $4`

// Deployments lists a page of a project's deployments (to one
// environment, or all when env is empty); any member may read them.
func (s *Store) Deployments(ctx context.Context, u User, project, env string, pg Page) ([]Deployment, string, error) {
	limit, after, err := pg.parse(1)
	if err != nil {
		return nil, "", err
	}
	var before int64
	if after[0] != "" {
		if _, err := fmt.Sscan(after[0], &before); err != nil || before <= 0 {
			return nil, "", domain.Errorf(domain.EInvalid, "cursor is not one this list made")
		}
	}
	if env != "" {
		if env, err = CheckEnvironmentName(env); err != nil {
			return nil, "", err
		}
	}
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, deploymentsSQL, p.ID, env, before, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("deployments: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Deployment, error) {
		var d Deployment
		err := row.Scan(&d.ID, &d.Environment, &d.RunID, &d.RunNumber, &d.JobID, &d.JobName, &d.Ref, &d.SHA, &d.URL,
			&d.Decision, &d.Reason, &d.DecidedBy, &d.DecidedAt, &d.State, &d.CreatedAt, &d.FinishedAt)
		return d, err
	})
	if err != nil {
		return nil, "", err
	}
	list, next := trim(list, limit, func(d Deployment) []string { return []string{fmt.Sprint(d.ID)} })
	return list, next, nil
}

// lockDeployJobSQL locks job $1 of run $2 and reads its deployment.
const lockDeployJobSQL = `
SELECT j.name, j.state, coalesce(j.environment, ''), coalesce(j.deploy_state, ''), r.project_id, r.actor
FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id = $1 AND j.run_id = $2 FOR UPDATE OF j`

// reviewerRoleSQL is the reviewer role environment $2 of project $1 asks
// for now ('' when it no longer asks).
const reviewerRoleSQL = `SELECT coalesce(reviewer_role, '') FROM environments WHERE project_id = $1 AND name = $2`

// recordDeployDecisionSQL records decision $2 by $3 on job $1's waiting
// deployment.
const recordDeployDecisionSQL = `
UPDATE deployments SET decision = $2, decided_by = $3, decided_at = now(), reason = nullif($4, '')
WHERE job_id = $1 AND decision = 'waiting'`

const approveDeploySQL = `UPDATE jobs SET deploy_state = 'approved', reason = NULL WHERE id = $1`

const rejectDeploySQL = `
UPDATE jobs SET state = 'FAILED', reason = $2, finished_at = now(), deploy_state = NULL WHERE id = $1`

// DecideDeployment approves or rejects the deployment job jobID of run
// runID waits for. u must hold the role the environment asks of its
// reviewers now (write at least). An approved job goes on (its group,
// then the queue); a rejected one fails, and its dependants are skipped.
func (s *Store) DecideDeployment(ctx context.Context, u User, runID, jobID string, approve bool, comment string) (JobDetail, error) {
	if len(comment) > 1000 {
		return JobDetail{}, domain.Errorf(domain.EInvalid, "comment is %d bytes, at most 1000", len(comment))
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		_, access, err := authorizeRun(ctx, tx, u, runID, RankRead)
		if err != nil {
			return err
		}
		var name, state, env, deploy, projectID, actor string
		err = tx.QueryRow(ctx, lockDeployJobSQL, jobID, runID).Scan(&name, &state, &env, &deploy, &projectID, &actor)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.ENotFound, "job %s of run %s not found", jobID, runID)
		}
		if err != nil {
			return fmt.Errorf("lock job: %w", err)
		}
		if state != domain.JobPending || deploy != "waiting" {
			return domain.Errorf(domain.EConflict, "job %s does not wait for a deployment review (it is %s)", name, state)
		}
		if err := checkReviewer(ctx, tx, access, projectID, env); err != nil {
			return err
		}
		return s.applyDeployDecision(ctx, tx, u, runID, jobID, env, approve, comment)
	})
	if err != nil {
		return JobDetail{}, err
	}
	if approve {
		s.signalQueued()
	}
	_ = s.afterRun(ctx, runID) // the job may have joined its group, or ended the run
	return s.GetJob(ctx, u, runID, jobID)
}

// checkReviewer checks that access is the role environment env of the
// project asks of its reviewers, read in the deciding transaction.
func checkReviewer(ctx context.Context, tx pgx.Tx, access Access, projectID, env string) error {
	var role string
	err := tx.QueryRow(ctx, reviewerRoleSQL, projectID, env).Scan(&role)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read environment: %w", err)
	}
	need := RankWrite
	if role == RoleAdmin {
		need = RankAdmin
	}
	if access.Rank < need {
		return domain.Errorf(domain.EForbidden, "deployments to %s are reviewed by members with the %s role", env, roleOfRank[need])
	}
	return nil
}

func (s *Store) applyDeployDecision(ctx context.Context, tx pgx.Tx, u User, runID, jobID, env string, approve bool, comment string) error {
	decision, reason := "approved", comment
	if approve {
		if _, err := tx.Exec(ctx, approveDeploySQL, jobID); err != nil {
			return fmt.Errorf("approve deployment: %w", err)
		}
	} else {
		decision = "rejected"
		why := fmt.Sprintf("deployment to %s rejected by %s", env, u.Name)
		if comment != "" {
			why += ": " + comment
		}
		if _, err := tx.Exec(ctx, rejectDeploySQL, jobID, domain.Truncate(why, 300)); err != nil {
			return fmt.Errorf("reject deployment: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, recordDeployDecisionSQL, jobID, decision, u.Name, reason); err != nil {
		return fmt.Errorf("record decision: %w", err)
	}
	return advanceRun(ctx, tx, runID)
}
