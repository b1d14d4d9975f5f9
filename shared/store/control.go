package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// What people do to runs: cancel, retry, approve, reject. Each checks the
// caller's rank in the run's project in its own transaction (authorizeRun).

// Cancel cancels a run, or one job of it when jobID is not empty: jobs not
// yet running become CANCELED at once (their dependants SKIPPED); running
// jobs get cancel_requested, which their runner hears on its next heartbeat
// and answers by stopping the steps and completing "canceled". Finished
// jobs are left alone. It returns how many jobs were canceled and asked.
// u needs the write role in the run's project.
func (s *Store) Cancel(ctx context.Context, u User, runID, jobID string) (canceled, asked int, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, _, err := authorizeRun(ctx, tx, u, runID, RankWrite); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM jobs WHERE run_id = $1 AND ($2 = '' OR id = $2))`, runID, jobID).Scan(&exists); err != nil {
			return fmt.Errorf("find jobs: %w", err)
		}
		if !exists {
			return domain.Errorf(domain.ENotFound, "no such run or job")
		}
		// The lock order of every other transition: a queued or running
		// job's row before its run's (claims, heartbeats, completions,
		// expiry), and pending rows only under the run's lock (advanceRun
		// queues and skips them). Taking a pending row before a running
		// one would close a cycle with a completion that holds the running
		// row and the run and is about to queue that pending job.
		if _, err := tx.Exec(ctx, `
			SELECT id FROM jobs WHERE run_id = $1 AND ($2 = '' OR id = $2) AND state IN ('QUEUED', 'RUNNING')
			ORDER BY id FOR UPDATE`, runID, jobID); err != nil {
			return fmt.Errorf("lock jobs: %w", err)
		}
		if _, err := tx.Exec(ctx, lockRunSQL, runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		tag, err := tx.Exec(ctx, `
			UPDATE jobs SET state = 'CANCELED', reason = 'canceled', finished_at = now()
			WHERE run_id = $1 AND ($2 = '' OR id = $2) AND state IN ('PENDING', 'QUEUED')`, runID, jobID)
		if err != nil {
			return fmt.Errorf("cancel jobs: %w", err)
		}
		canceled = int(tag.RowsAffected())
		tag, err = tx.Exec(ctx, `
			UPDATE jobs SET cancel_requested = true
			WHERE run_id = $1 AND ($2 = '' OR id = $2) AND state = 'RUNNING'`, runID, jobID)
		if err != nil {
			return fmt.Errorf("request cancel: %w", err)
		}
		asked = int(tag.RowsAffected())
		if jobID == "" {
			if _, err := tx.Exec(ctx, `UPDATE runs SET cancel_requested = true WHERE id = $1`, runID); err != nil {
				return fmt.Errorf("cancel run: %w", err)
			}
		}
		return advanceRun(ctx, tx, runID)
	})
	return canceled, asked, err
}

// Retry creates a new run from a finished run: all its jobs, or only jobID,
// on the same source snapshot, in the same trust tier and cache scope (a
// retry of a fork's run stays untrusted, and waits for approval as the
// first did). The old run is left as it was. u needs the write role, and
// to retry a trusted run (which gets secrets again) the project's secrets
// permission, as starting a trusted run would.
func (s *Store) Retry(ctx context.Context, u User, runID, jobID string) (Run, error) {
	var run Run
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		_, a, err := authorizeRun(ctx, tx, u, runID, RankWrite)
		if err != nil {
			return err
		}
		nr, err := retryOf(ctx, tx, runID, jobID, u.Name)
		if err != nil {
			return err
		}
		if !nr.Untrusted && !a.Secrets {
			return domain.Errorf(domain.EForbidden, "run %s is trusted (it gets the project's secrets): retrying it needs the secrets permission", runID)
		}
		run, err = s.createRunTx(ctx, tx, nr)
		return err
	})
	if err != nil {
		return Run{}, err
	}
	s.signalQueued()
	return run, nil
}

// retryOf is the NewRun that repeats a finished run (or one job of it).
func retryOf(ctx context.Context, tx pgx.Tx, runID, jobID, who string) (NewRun, error) {
	old, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+`
		FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1`, runID))
	if err != nil {
		return NewRun{}, fmt.Errorf("retry: %w", err)
	}
	if !IsTerminalRun(old.State) {
		return NewRun{}, domain.Errorf(domain.EConflict, "run %s is %s; retry it once it has finished (or cancel it)", runID, old.State)
	}
	rows, err := tx.Query(ctx, `
		SELECT name, needs, labels, spec, timeout_seconds, retry_lease_lost, retry_failed
		FROM jobs WHERE run_id = $1 AND ($2 = '' OR id = $2) ORDER BY created_at, id`, runID, jobID)
	if err != nil {
		return NewRun{}, err
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NewJob, error) {
		var j NewJob
		var spec []byte
		if err := row.Scan(&j.Name, &j.Needs, &j.Labels, &spec, &j.TimeoutSeconds, &j.RetryLeaseLost, &j.RetryFailed); err != nil {
			return j, err
		}
		var cj domain.ClaimedJob
		if err := json.Unmarshal(spec, &cj); err != nil {
			return j, fmt.Errorf("job %s spec: %w", j.Name, err)
		}
		j.Spec = cj.JobSpec
		return j, nil
	})
	if err != nil {
		return NewRun{}, err
	}
	if len(jobs) == 0 {
		return NewRun{}, domain.Errorf(domain.ENotFound, "job %s of run %s not found", jobID, runID)
	}
	nr := NewRun{Project: old.Project, GitSHA: old.GitSHA, GitRef: old.GitRef, GitDirty: old.GitDirty,
		Source:    domain.Source{BlobDigest: old.SourceDigest, ManifestDigest: old.ManifestDigest, Size: old.SourceSize},
		Untrusted: !old.Trusted, Scope: old.Scope, BaseRef: old.BaseRef, Actor: old.Actor,
		Trigger: fmt.Sprintf("retry of #%d by %s", old.Number, who), Jobs: jobs}
	if jobID != "" {
		j := jobs[0]
		if len(j.Needs) > 0 {
			// Alone, it would run without the jobs it needs passing first
			// (a deploy without its tests).
			return NewRun{}, domain.Errorf(domain.EInvalid, "job %s needs %v; retry the whole run instead", j.Name, j.Needs)
		}
		nr.Jobs = []NewJob{j}
		nr.Trigger = fmt.Sprintf("retry of #%d %s by %s", old.Number, j.Name, who)
	}
	return nr, nil
}

// Approve lets a run that waits for approval start, and remembers its actor
// in the project, so that their later untrusted runs start at once. u needs
// the write role and must not be the run's actor.
func (s *Store) Approve(ctx context.Context, u User, runID string) (Run, error) {
	run, err := s.decide(ctx, u, runID, ApprovalApproved)
	if err == nil {
		s.signalQueued()
	}
	return run, err
}

// Reject ends a run that waits for approval: its jobs become CANCELED with
// the reason "rejected by <user>".
func (s *Store) Reject(ctx context.Context, u User, runID string) (Run, error) {
	return s.decide(ctx, u, runID, ApprovalRejected)
}

func (s *Store) decide(ctx context.Context, u User, runID, decision string) (Run, error) {
	var run Run
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		projectID, _, err := authorizeRun(ctx, tx, u, runID, RankWrite)
		if err != nil {
			return err
		}
		var approval, actor, state string
		if err := tx.QueryRow(ctx, `SELECT approval, actor, state FROM runs WHERE id = $1 FOR UPDATE`, runID).
			Scan(&approval, &actor, &state); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		switch {
		case approval != ApprovalPending:
			return domain.Errorf(domain.EConflict, "run %s does not wait for approval (approval: %s)", runID, approval)
		case IsTerminalRun(state):
			return domain.Errorf(domain.EConflict, "run %s is already %s", runID, state)
		case actor == "user:"+u.ID:
			return domain.Errorf(domain.EForbidden, "a run cannot be approved or rejected by the member it is for")
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET approval = $2, approval_by = $3, approval_at = now() WHERE id = $1`,
			runID, decision, u.Name); err != nil {
			return fmt.Errorf("record decision: %w", err)
		}
		if decision == ApprovalApproved {
			if _, err := tx.Exec(ctx, `
				INSERT INTO approved_actors (project_id, actor, approved_by, run_id) VALUES ($1, $2, $3, $4)
				ON CONFLICT (project_id, actor) DO NOTHING`, projectID, actor, u.Name, runID); err != nil {
				return fmt.Errorf("approve actor: %w", err)
			}
			_, err = tx.Exec(ctx, `UPDATE jobs SET reason = NULL WHERE run_id = $1 AND state = 'PENDING' AND reason = $2`,
				runID, ReasonWaitingApproval)
		} else {
			_, err = tx.Exec(ctx, `
				UPDATE jobs SET state = 'CANCELED', reason = 'rejected by ' || $2, finished_at = now()
				WHERE run_id = $1 AND state = 'PENDING'`, runID, u.Name)
		}
		if err != nil {
			return fmt.Errorf("release jobs: %w", err)
		}
		if err := advanceRun(ctx, tx, runID); err != nil {
			return err
		}
		run, err = scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+`
			FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1`, runID))
		return err
	})
	return run, err
}
