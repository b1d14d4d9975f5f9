package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// Concurrency groups (docs/pipeline.md), as GitHub's: a project's group
// has at most one run in progress and one waiting. A new run supersedes
// the waiting one (CANCELED, "superseded by #N"), cancels the one in
// progress through the ordinary cancel path when cancel-in-progress is
// set, and waits while a run of the group is open. A run's end releases
// the waiting run, in a transaction of its own after the end commits
// (afterRun): it takes the group's lock first, as a new run does,
// then rows, so the two never wait for each other in a cycle. The sweeper
// releases what a crash between the two left waiting.

// groupLockSQL serializes the runs of group $2 of project $1.
const groupLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 1873))`

// groupOpenSQL lists the open runs of group $2 of project $1 other than
// run $3, waiting ones first: id, number, waiting, and whether its event
// is newer than $4 (run $3's event; null: run $3 was made for no
// earlier event, so none is newer).
const groupOpenSQL = `
SELECT id, number, concurrency_waiting, coalesce(coalesce(event_at, created_at) > $4, false) FROM runs
WHERE project_id = $1 AND concurrency_group = $2 AND state IN ('PENDING', 'RUNNING') AND id <> $3
ORDER BY concurrency_waiting DESC, number`

// waitGroupSQL makes run $1 wait for its group; its pending jobs say so
// ($2), unless they already say why they wait (approval).
const waitGroupSQL = `
WITH r AS (UPDATE runs SET concurrency_waiting = true WHERE id = $1)
UPDATE jobs SET reason = $2 WHERE run_id = $1 AND state = 'PENDING' AND reason IS NULL`

// cancelRunWhySQL cancels the waiting jobs of run $1 with reason $2; all
// ($3) or all but those whose condition survives a cancel (all the same
// when the run has not started: it waits for approval or its group).
const cancelRunWhySQL = `
UPDATE jobs SET state = 'CANCELED', reason = $2, finished_at = now()
WHERE run_id = $1 AND state IN ('PENDING', 'QUEUED')
  AND ($3 OR NOT survives_cancel OR EXISTS (SELECT 1 FROM runs r WHERE r.id = $1
                                            AND (r.approval = 'pending' OR r.concurrency_waiting)))`

// groupNextSQL locks the run waiting in group $2 of project $1, when no
// run of the group is open but waiting ones.
const groupNextSQL = `
SELECT id FROM runs w
WHERE project_id = $1 AND concurrency_group = $2 AND state = 'PENDING' AND concurrency_waiting
  AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.project_id = $1 AND o.concurrency_group = $2
                  AND o.state IN ('PENDING', 'RUNNING') AND NOT o.concurrency_waiting)
ORDER BY number DESC LIMIT 1
FOR UPDATE`

// groupOfRunSQL reads run $1's project, group and state, and the groups
// its jobs joined.
const groupOfRunSQL = `
SELECT project_id, coalesce(concurrency_group, ''), state,
       ARRAY(SELECT DISTINCT concurrency_group FROM jobs WHERE run_id = $1 AND concurrency_group IS NOT NULL)
FROM runs WHERE id = $1`

// releaseRunSQL lets run $1 go on; its jobs' waiting reason $2 goes.
const releaseRunSQL = `
WITH r AS (UPDATE runs SET concurrency_waiting = false WHERE id = $1)
UPDATE jobs SET reason = NULL WHERE run_id = $1 AND state = 'PENDING' AND reason = $2`

// stuckGroupsSQL lists the groups with a waiting run, for the sweeper.
const stuckGroupsSQL = `
SELECT DISTINCT project_id, concurrency_group FROM runs
WHERE concurrency_group IS NOT NULL AND state IN ('PENDING', 'RUNNING') AND concurrency_waiting`

func waitingReason(group string) string { return "waiting for concurrency group " + group }

// groupOf evaluates the run's concurrency group with its facts.
func groupOf(run *Run, c *domain.Concurrency) error {
	if c == nil || c.Group == "" {
		return nil
	}
	vars := runContexts(run)
	g, err := groupName(c.Group, vars, run.Trusted, nil)
	if err != nil {
		return domain.Errorf(domain.EInvalid, "concurrency.group: %v", err)
	}
	cancel, err := cancelOf(c.CancelInProgress, c.CancelExpr, vars, nil)
	if err != nil {
		return domain.Errorf(domain.EInvalid, "%v", err)
	}
	run.ConcurrencyGroup, run.ConcurrencyCancel = g, cancel
	return nil
}

// joinGroup puts a new run into its group, in its transaction: the run
// waiting in the group is superseded, the one in progress canceled when
// c.CancelInProgress, and the new run waits while one is open.
func joinGroup(ctx context.Context, tx pgx.Tx, run *Run, c *domain.Concurrency) error {
	if run.ConcurrencyGroup == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, groupLockSQL, run.ProjectID, run.ConcurrencyGroup); err != nil {
		return fmt.Errorf("lock concurrency group: %w", err)
	}
	rows, err := tx.Query(ctx, groupOpenSQL, run.ProjectID, run.ConcurrencyGroup, run.ID, run.eventAt)
	if err != nil {
		return fmt.Errorf("concurrency group: %w", err)
	}
	type open struct {
		id      string
		number  int64
		waiting bool
		newer   bool // made for a later event than run's
	}
	others, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (open, error) {
		var o open
		return o, row.Scan(&o.id, &o.number, &o.waiting, &o.newer)
	})
	if err != nil {
		return fmt.Errorf("concurrency group: %w", err)
	}
	// A run of an older event than one already in the group (a push whose
	// delivery was retried after a later push's) comes too late: it is
	// the one superseded, and cancels nothing.
	for _, o := range others {
		if o.newer {
			return cancelRunTx(ctx, tx, run.ID, fmt.Sprintf("superseded by #%d, of a later event", o.number), true)
		}
	}
	busy := false
	for _, o := range others {
		switch {
		case o.waiting:
			err = cancelRunTx(ctx, tx, o.id, fmt.Sprintf("superseded by #%d", run.Number), true)
		case run.ConcurrencyCancel && run.Approval != ApprovalPending:
			// A run that waits for approval cancels nothing until approved.
			run.canceled = append(run.canceled, o.id)
			err = cancelRunTx(ctx, tx, o.id, fmt.Sprintf("canceled by #%d (concurrency group %s)", run.Number, run.ConcurrencyGroup), false)
			if err == nil {
				busy, err = stillOpen(ctx, tx, o.id, busy) // until its running jobs have stopped
			}
		default:
			busy = true
		}
		if err != nil {
			return err
		}
	}
	if !busy {
		return nil
	}
	run.ConcurrencyWaiting = true
	if _, err := tx.Exec(ctx, waitGroupSQL, run.ID, waitingReason(run.ConcurrencyGroup)); err != nil {
		return fmt.Errorf("wait for concurrency group: %w", err)
	}
	return nil
}

// stillOpen is busy, or whether run runID is still open.
func stillOpen(ctx context.Context, tx pgx.Tx, runID string, busy bool) (bool, error) {
	var state string
	if err := tx.QueryRow(ctx, `SELECT state FROM runs WHERE id = $1`, runID).Scan(&state); err != nil {
		return false, fmt.Errorf("run %s: %w", runID, err)
	}
	return busy || !IsTerminalRun(state), nil
}

// cancelRunTx cancels run runID as Cancel does, in tx, saying why: its
// waiting jobs end CANCELED (all, or all but those whose condition
// survives a cancel), its running ones are asked to stop. Lock order as
// Cancel's: the run's queued and running job rows, then the run.
func cancelRunTx(ctx context.Context, tx pgx.Tx, runID, why string, all bool) error {
	if _, err := tx.Exec(ctx, lockCancelTargetsSQL, runID, ""); err != nil {
		return fmt.Errorf("lock jobs: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(lockRunSQL, runID)
	b.Queue(cancelRunWhySQL, runID, why, all)
	b.Queue(askCancelSQL, runID, "")
	b.Queue(cancelRunSQL, runID)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("cancel run %s: %w", runID, err)
	}
	return advanceRun(ctx, tx, runID)
}

// afterRun settles the groups run runID is in after a transaction that
// moved it on commits: its own, whose waiting run goes on once no run of
// the group is open (a no-op while runID is open), and those its jobs
// joined (settleJobGroup). The change stands whatever happens here: the
// sweeper settles what this leaves.
func (s *Store) afterRun(ctx context.Context, runID string) error {
	var projectID, group, state string
	var jobGroups []string
	if err := s.pool.QueryRow(ctx, groupOfRunSQL, runID).Scan(&projectID, &group, &state, &jobGroups); err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	var errs []error
	if group != "" && IsTerminalRun(state) {
		errs = append(errs, s.releaseGroupOf(ctx, projectID, group))
	}
	for _, g := range jobGroups {
		errs = append(errs, s.settleJobGroup(ctx, projectID, g))
	}
	return errors.Join(errs...)
}

func (s *Store) releaseGroupOf(ctx context.Context, projectID, group string) error {
	var next string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, groupLockSQL, projectID, group); err != nil {
			return fmt.Errorf("lock concurrency group: %w", err)
		}
		err := tx.QueryRow(ctx, groupNextSQL, projectID, group).Scan(&next)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // none waits, or a run of the group is open: it releases when it ends
		}
		if err != nil {
			return fmt.Errorf("concurrency group: %w", err)
		}
		if _, err := tx.Exec(ctx, releaseRunSQL, next, waitingReason(group)); err != nil {
			return fmt.Errorf("release run: %w", err)
		}
		return advanceRun(ctx, tx, next)
	})
	if err != nil || next == "" {
		return err
	}
	s.signalQueued()
	// Its jobs that need nothing have joined their groups.
	return s.settleRunJobs(ctx, next)
}

// releaseStuckGroups releases the groups whose waiting run was left
// waiting (its predecessor ended, and the process that ended it did not
// get to release it).
func (s *Store) releaseStuckGroups(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, stuckGroupsSQL)
	if err != nil {
		return fmt.Errorf("concurrency groups: %w", err)
	}
	type group struct{ project, name string }
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (group, error) {
		var g group
		return g, row.Scan(&g.project, &g.name)
	})
	if err != nil {
		return fmt.Errorf("concurrency groups: %w", err)
	}
	var errs []error
	for _, g := range groups {
		errs = append(errs, s.releaseGroupOf(ctx, g.project, g.name))
	}
	return errors.Join(errs...)
}

// inputsOf is the inputs context of a run's facts ({} when it has none).
func inputsOf(facts map[string]any) map[string]any {
	if in, ok := facts["inputs"].(map[string]any); ok {
		return in
	}
	return map[string]any{}
}

// runContexts are the contexts a new run's facts give the control plane's
// expressions (factContexts).
func runContexts(run *Run) map[string]any {
	facts, _ := expr.FromGo(runFacts(run)).(map[string]any)
	return factContexts(facts)
}

// factContexts are the contexts a run's facts give the control plane's
// expressions: forgeci (github), inputs and vars (the project's
// variables the run was made with).
func factContexts(facts map[string]any) map[string]any {
	vars, ok := facts["vars"].(map[string]any)
	if !ok {
		vars = map[string]any{}
	}
	return map[string]any{"forgeci": facts, "github": facts, "inputs": inputsOf(facts), "vars": vars}
}
