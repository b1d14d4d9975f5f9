package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/forgeci/forgeci/shared/domain"
)

// What moves a run on: advanceRun after every job transition, and what
// people do to runs: cancel, approve, reject (retry is in runs.go, beside
// run creation). Each checks the caller's rank in the run's project in its
// own transaction (authorizeRun).

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
		if err := tx.QueryRow(ctx, cancelTargetsExistSQL, runID, jobID).Scan(&exists); err != nil {
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
		if _, err := tx.Exec(ctx, lockCancelTargetsSQL, runID, jobID); err != nil {
			return fmt.Errorf("lock jobs: %w", err)
		}
		if _, err := tx.Exec(ctx, lockRunSQL, runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		tag, err := tx.Exec(ctx, cancelWaitingSQL, runID, jobID)
		if err != nil {
			return fmt.Errorf("cancel jobs: %w", err)
		}
		canceled = int(tag.RowsAffected())
		tag, err = tx.Exec(ctx, askCancelSQL, runID, jobID)
		if err != nil {
			return fmt.Errorf("request cancel: %w", err)
		}
		asked = int(tag.RowsAffected())
		if jobID == "" {
			if _, err := tx.Exec(ctx, cancelRunSQL, runID); err != nil {
				return fmt.Errorf("cancel run: %w", err)
			}
		}
		return advanceRun(ctx, tx, runID)
	})
	if err == nil {
		// A run that ended here lets its group's waiting run go on; the
		// cancel stands whatever happens here (the sweeper releases it).
		_ = s.afterRun(ctx, runID)
	}
	return canceled, asked, err
}

// Approve lets a run that waits for approval start, and remembers its actor
// in the project, so that their later untrusted runs start at once. u needs
// the write role and must not be the run's actor.
func (s *Store) Approve(ctx context.Context, u User, runID string) (Run, error) {
	run, released, err := s.decide(ctx, u, runID, ApprovalApproved)
	if err == nil {
		s.signalQueued()
		for _, id := range append([]string{runID}, released...) {
			_ = s.afterRun(ctx, id) // its jobs may have joined their groups
		}
	}
	return run, err
}

// Reject ends a run that waits for approval: its jobs become CANCELED with
// the reason "rejected by <user>".
func (s *Store) Reject(ctx context.Context, u User, runID string) (Run, error) {
	run, _, err := s.decide(ctx, u, runID, ApprovalRejected)
	if err == nil {
		_ = s.afterRun(ctx, runID) // as Cancel
	}
	return run, err
}

// decide records decision on run runID for u. Approving it approves its
// actor: their other runs that wait for approval start too (released);
// one another approver is deciding at that moment is left to them.
func (s *Store) decide(ctx context.Context, u User, runID, decision string) (Run, []string, error) {
	var run Run
	var released []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		projectID, _, err := authorizeRun(ctx, tx, u, runID, RankWrite)
		if err != nil {
			return err
		}
		if decision == ApprovalApproved {
			if _, err := tx.Exec(ctx, lockProjectRunsSQL, projectID); err != nil {
				return fmt.Errorf("lock project: %w", err)
			}
		}
		var approval, actor, state string
		if err := tx.QueryRow(ctx, lockApprovalSQL, runID).Scan(&approval, &actor, &state); err != nil {
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
		if err := applyDecision(ctx, tx, runID, projectID, actor, decision, u.Name); err != nil {
			return err
		}
		if decision == ApprovalApproved {
			if released, err = releaseActor(ctx, tx, projectID, actor, runID, u.Name); err != nil {
				return err
			}
		}
		run, err = scanRun(tx.QueryRow(ctx, getRunSQL, runID))
		return err
	})
	return run, released, err
}

// releaseActor approves, by by, the runs of approved actor actor in
// project projectID other than runID that still wait for approval.
func releaseActor(ctx context.Context, tx pgx.Tx, projectID, actor, runID, by string) ([]string, error) {
	return decideEach(ctx, tx, actorWaitingSQL, []any{projectID, actor, runID}, projectID, actor, ApprovalApproved, by)
}

// decideEach records decision, by by, on each run query (with args)
// locks, and returns them.
func decideEach(ctx context.Context, tx pgx.Tx, query string, args []any, projectID, actor, decision, by string) ([]string, error) {
	ids, err := queryIDs(ctx, tx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("lock runs to decide: %w", err)
	}
	for _, id := range ids {
		if err := applyDecision(ctx, tx, id, projectID, actor, decision, by); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// applyDecision records decision on run runID, which waits for approval
// (its row locked), by: approved, the actor's later runs start at once
// and its jobs are released; rejected, its pending jobs are CANCELED.
func applyDecision(ctx context.Context, tx pgx.Tx, runID, projectID, actor, decision, by string) error {
	if _, err := tx.Exec(ctx, recordDecisionSQL, runID, decision, by); err != nil {
		return fmt.Errorf("record decision: %w", err)
	}
	var err error
	if decision == ApprovalApproved {
		if _, err := tx.Exec(ctx, approveActorSQL, projectID, actor, by, runID); err != nil {
			return fmt.Errorf("approve actor: %w", err)
		}
		if _, err := tx.Exec(ctx, insertApprovedChecksSQL, runID); err != nil {
			return fmt.Errorf("check runs of the approved run: %w", err)
		}
		_, err = tx.Exec(ctx, releaseApprovedSQL, runID, ReasonWaitingApproval)
	} else if _, err = tx.Exec(ctx, cancelRejectedSQL, runID, by); err == nil {
		_, err = tx.Exec(ctx, releaseRejectedSourceSQL, runID)
	}
	if err != nil {
		return fmt.Errorf("release jobs: %w", err)
	}
	return advanceRun(ctx, tx, runID)
}

// advanceRun moves a run forward after any job transition, inside the
// caller's transaction: dependants of jobs that did not pass become SKIPPED
// (transitively), pending jobs whose needs all passed become QUEUED (unless
// the run waits for approval), and the run's state is derived from its jobs.
//
// It locks the run row first, so that two jobs of one run finishing at the
// same time take turns here; under READ COMMITTED the second then sees the
// first's committed state and no dependant is left PENDING forever. Lock
// order: the queued or running job row(s) a transition is about, then the
// run row, then (here) the pending rows it queues or skips, which only a
// holder of the run's lock writes.
//
// The statements go as one pipelined batch: the run row stays locked
// from the first to the commit, and every job of the run that finishes
// waits for it, so the lock is held for one round trip instead of four.
// The run row is written only when its state or times change: most
// completions change nothing there, and a write would leave one more row
// version behind for every completion (which an old snapshot keeps alive).
func advanceRun(ctx context.Context, tx pgx.Tx, runID string) error {
	// Each round that decides a condition can end jobs, which can skip or
	// queue others, or let another condition be decided: at most one round
	// per job, and nearly always one. The rounds share one work budget.
	d := newDecider()
	for round := 0; ; round++ {
		b := &pgx.Batch{}
		if round == 0 {
			b.Queue(lockRunSQL, runID)
		}
		b.Queue(skipDoomedSQL, runID)
		b.Queue(queueReadySQL, runID).Exec(func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() > 0 {
				noteQueued(tx)
			}
			return nil
		})
		var list []undecided
		b.Queue(decidableSQL, runID).Query(func(rows pgx.Rows) error {
			var err error
			list, err = scanUndecided(rows)
			return err
		})
		b.Queue(deriveRunStateSQL+" RETURNING n.finished_at IS NOT NULL", runID).Query(func(rows pgx.Rows) error {
			// A run that ended has notifications for the sweeper to send.
			for rows.Next() {
				var ended bool
				if err := rows.Scan(&ended); err != nil {
					return err
				}
				if ended {
					noteSweep(tx)
				}
			}
			return rows.Err()
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("advance run %s: %w", runID, err)
		}
		if len(list) == 0 {
			return nil
		}
		if round > pipelineMaxJobs {
			return fmt.Errorf("advance run %s: conditions still undecided after %d rounds", runID, round)
		}
		if err := decideJobs(ctx, tx, runID, list, d); err != nil {
			return err
		}
	}
}

// pipelineMaxJobs bounds advanceRun's rounds (pipeline.MaxJobs; the store
// does not import the parser).
const pipelineMaxJobs = 500
