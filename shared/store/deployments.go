package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Deployment is one job's deployment to an environment, as the history
// shows it. Decision is how it was let go (automatic, waiting, approved,
// rejected, refused, or canceled while it waited); State is the job's
// state now.
type Deployment struct {
	ID          int64  `json:"id"`
	Environment string `json:"environment"`
	RunID       string `json:"run_id"`
	RunNumber   int64  `json:"run_number"`
	JobID       string `json:"job_id"`
	JobName     string `json:"job_name"`
	// Trigger is what started the run (github:push ..., submit by ...),
	// and Dirty whether its source had uncommitted changes: a ref named
	// by a submitter is theirs to name.
	Trigger string `json:"trigger"`
	Dirty   bool   `json:"dirty"`
	Ref     string `json:"ref"`
	SHA     string `json:"sha"`
	// Inputs are a manual run's inputs, as the deployment was gated with
	// them: they reach its scripts.
	Inputs     map[string]any `json:"inputs,omitempty"`
	URL        string         `json:"url,omitempty"`
	Decision   string         `json:"decision"`
	Reason     string         `json:"reason,omitempty"`
	DecidedBy  string         `json:"decided_by,omitempty"`
	DecidedAt  *time.Time     `json:"decided_at,omitempty"`
	State      string         `json:"state"` // the job's now ("" once its run is gone)
	CreatedAt  time.Time      `json:"created_at"`
	FinishedAt *time.Time     `json:"finished_at,omitempty"`
}

// deploymentsSQL is a page of project $1's deployments, newest first:
// to environment $2 (empty: all), before ID $3 (0: from the newest), at
// most $4. A waiting deployment whose job ended meanwhile (its run was
// canceled) shows as canceled; one whose run is gone keeps its facts.
const deploymentsSQL = `
SELECT d.id, d.environment, coalesce(d.run_id, ''), d.run_number, coalesce(d.job_id, ''), d.job_name, d.trigger, d.dirty,
       d.ref, d.sha, coalesce(d.url, ''),
       CASE WHEN d.decision = 'waiting' AND j.state IS DISTINCT FROM 'PENDING' THEN 'canceled' ELSE d.decision END,
       coalesce(d.reason, ''), coalesce(d.decided_by, ''), d.decided_at, coalesce(j.state, ''), d.created_at, j.finished_at,
       d.inputs
FROM deployments d LEFT JOIN jobs j ON j.id = d.job_id
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
		err := row.Scan(&d.ID, &d.Environment, &d.RunID, &d.RunNumber, &d.JobID, &d.JobName, &d.Trigger, &d.Dirty, &d.Ref, &d.SHA, &d.URL,
			&d.Decision, &d.Reason, &d.DecidedBy, &d.DecidedAt, &d.State, &d.CreatedAt, &d.FinishedAt, &d.Inputs)
		return d, err
	})
	if err != nil {
		return nil, "", err
	}
	list, next := trim(list, limit, func(d Deployment) []string { return []string{fmt.Sprint(d.ID)} })
	return list, next, nil
}

// lockDeployJobSQL locks job $1 of run $2 and reads its deployment, with
// its run's facts. The caller holds the run's lock first: the order of
// advanceRun, Cancel and fail-fast (run, then its pending rows).
const lockDeployJobSQL = `
SELECT j.name, j.state, coalesce(j.environment, ''), coalesce(j.deploy_state, ''), r.project_id, r.actor, coalesce(r.source_by, ''), coalesce(r.git_ref, ''),
       r.trusted, (SELECT p.name FROM projects p WHERE p.id = r.project_id), coalesce(r.retried_by, '')
FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id = $1 AND j.run_id = $2 FOR UPDATE OF j`

// environmentRulesSQL reads environment $2 of project $1 as it is now,
// held until the decision commits (a change of its rules waits).
const environmentRulesSQL = `
SELECT coalesce(reviewer_role, ''), allowed_refs, prevent_self_review, updated_at FROM environments
WHERE project_id = $1 AND name = $2 FOR SHARE`

// recordDeployDecisionSQL records decision $2 by $3 on job $1's waiting
// deployment.
const recordDeployDecisionSQL = `
UPDATE deployments SET decision = $2, decided_by = $3, decided_at = now(), reason = nullif($4, '')
WHERE job_id = $1 AND decision = 'waiting'`

// approveDeploySQL lets job $1 deploy under the rules of time $2 (NULL:
// its environment has none).
const approveDeploySQL = `UPDATE jobs SET deploy_state = 'approved', deploy_rules_at = $2, reason = NULL WHERE id = $1`

const rejectDeploySQL = `
UPDATE jobs SET state = 'FAILED', reason = $2, finished_at = now(), deploy_state = NULL WHERE id = $1`

// DecideDeployment approves or rejects the deployment job jobID of run
// runID waits for. u must hold the role the environment asks of its
// reviewers now (write at least). An approved job goes on (its group,
// then the queue); a rejected one fails, and its dependants are skipped.
func (s *Store) DecideDeployment(ctx context.Context, u User, runID, jobID string, approve bool, comment string) (JobDetail, error) {
	if len(comment) > 1000 || !domain.PlainText(comment) {
		return JobDetail{}, domain.Errorf(domain.EInvalid, "comment is at most 1000 bytes of text on one line, without control characters")
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		_, access, err := authorizeRun(ctx, tx, u, runID, RankRead)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, lockRunSQL, runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		var name, state, env, deploy, projectID, actor, sourceBy, ref, project, retriedBy string
		var trusted bool
		err = tx.QueryRow(ctx, lockDeployJobSQL, jobID, runID).Scan(&name, &state, &env, &deploy, &projectID, &actor, &sourceBy, &ref, &trusted,
			&project, &retriedBy)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.ENotFound, "job %s of run %s not found", jobID, runID)
		}
		if err != nil {
			return fmt.Errorf("lock job: %w", err)
		}
		if state != domain.JobPending || deploy != "waiting" {
			return domain.Errorf(domain.EConflict, "job %s does not wait for a deployment review (it is %s)", name, state)
		}
		if approve && !trusted {
			// One that waited from before untrusted runs stopped deploying.
			return domain.Errorf(domain.EForbidden, "an untrusted run does not deploy: reject it")
		}
		rulesAt, err := checkReviewer(ctx, tx, u, access, review{projectID: projectID, env: env, actor: actor, sourceBy: sourceBy,
			retriedBy: retriedBy, ref: ref, approve: approve})
		if err != nil {
			return err
		}
		if approve {
			if err := authorsStillMay(ctx, tx, Run{ProjectID: projectID, Project: project, Actor: actor, SourceBy: sourceBy, RetriedBy: retriedBy}); err != nil {
				return err
			}
		}
		return s.applyDeployDecision(ctx, tx, u, deployDecision{runID: runID, jobID: jobID, env: env, rulesAt: rulesAt}, approve, comment)
	})
	if err != nil {
		return JobDetail{}, err
	}
	if approve {
		s.signalQueued()
	} else {
		_, _ = s.failFast(ctx, runID) // a rejected combination fails its matrix as a failure would
	}
	_ = s.afterRun(ctx, runID) // the job may have joined its group, or ended the run
	return s.GetJob(ctx, u, runID, jobID)
}

// authorsStillMay checks, for an approval, that the member who started a
// trusted run and the one whose snapshot it runs may still start trusted
// runs (write role and the secrets permission): a deployment can wait for
// days, and an approval must not hand the environment's secrets to the
// code of a member removed since, as a retry or a schedule would not.
func authorsStillMay(ctx context.Context, tx pgx.Tx, run Run) error {
	for _, who := range []struct{ actor, what string }{
		{run.Actor, "this deployment's run was started"}, {run.SourceBy, "this deployment's snapshot was submitted"},
		{run.RetriedBy, "this deployment's run was retried"},
	} {
		if who.actor == "" {
			continue
		}
		of := Run{Actor: who.actor, ProjectID: run.ProjectID, Project: run.Project, Trusted: true}
		if err := authorStillMay(ctx, tx, of, who.what); err != nil {
			var de *domain.Error
			if errors.As(err, &de) && de.Code == domain.EForbidden {
				msg, _ := strings.CutSuffix(de.Message, ": submit it again")
				return domain.Errorf(domain.EForbidden, "%s: reject it", msg)
			}
			return err
		}
	}
	return nil
}

// review is a decision on a deployment, with what it is about.
type review struct {
	projectID, env, actor, ref string
	// sourceBy submitted the run's snapshot (Run.SourceBy): their code,
	// whoever ran it, is theirs to not review.
	sourceBy string
	// retriedBy asked for the run as a retry of another's.
	retriedBy string
	approve   bool
}

// checkReviewer checks the decision against the environment's rules as
// they are now, read in the deciding transaction: the reviewers' role
// (write at least), and for an approval, that the ref is still allowed
// and, when self-review is prevented, that u is not the run's member. It
// returns when the rules were written (nil: there are none), which an
// approval is under.
func checkReviewer(ctx context.Context, tx pgx.Tx, u User, access Access, rv review) (*time.Time, error) {
	var role string
	var refs []string
	var noSelf bool
	var at *time.Time
	err := tx.QueryRow(ctx, environmentRulesSQL, rv.projectID, rv.env).Scan(&role, &refs, &noSelf, &at)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read environment: %w", err)
	}
	need := RankWrite
	if role == RoleAdmin {
		need = RankAdmin
	}
	switch {
	case access.Rank < need:
		return nil, domain.Errorf(domain.EForbidden, "deployments to %s are reviewed by members with the %s role", rv.env, roleOfRank[need])
	case rv.approve && !refAllowed(refs, rv.ref):
		return nil, domain.Errorf(domain.EForbidden, "environment %s no longer allows %s to deploy (allowed: %s): reject it",
			rv.env, refOrNone(rv.ref), strings.Join(refs, ", "))
	case rv.approve && noSelf && rv.actor == "user:"+u.ID:
		return nil, domain.Errorf(domain.EForbidden, "environment %s prevents self-review: another member must approve a deployment of your run", rv.env)
	case rv.approve && noSelf && rv.sourceBy == "user:"+u.ID:
		return nil, domain.Errorf(domain.EForbidden, "environment %s prevents self-review: another member must approve a deployment of the snapshot you submitted", rv.env)
	case rv.approve && noSelf && rv.retriedBy == "user:"+u.ID:
		return nil, domain.Errorf(domain.EForbidden, "environment %s prevents self-review: another member must approve a deployment of a run you retried", rv.env)
	}
	return at, nil
}

// deployDecision is the deployment a decision is on, with the time of the
// rules it was checked against.
type deployDecision struct {
	runID, jobID, env string
	rulesAt           *time.Time
}

func (s *Store) applyDeployDecision(ctx context.Context, tx pgx.Tx, u User, d deployDecision, approve bool, comment string) error {
	runID, jobID, env := d.runID, d.jobID, d.env
	decision, reason := "approved", comment
	if approve {
		if _, err := tx.Exec(ctx, approveDeploySQL, jobID, d.rulesAt); err != nil {
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
