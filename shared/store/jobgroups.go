package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// Job concurrency groups (docs/pipeline.md), as GitHub's: a project's
// group holds at most one job in progress and one waiting, across runs.
// A job joins its group when its needs have ended (its group, which may
// read needs, is evaluated then, in advanceRun's transaction) and waits,
// PENDING; settleJobGroup, in transactions of its own after that commits,
// lets it go on, supersedes an older waiting job, or cancels the job in
// progress (cancel-in-progress) through the ordinary fenced cancel.
//
// Lock order: settleJobGroup takes the group's lock first, then one run's
// rows in the order every other transition does; it touches one run per
// transaction, and nothing takes a job group's lock while holding a row.
// So a run's completion never waits for a group while a settle waits for
// that run. The sweeper settles what a crash in between left waiting.

// jobGroupLockSQL serializes the jobs of group $2 of project $1 (another
// key space than the runs' groups).
const jobGroupLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 1874))`

// decideJoinSQL lets job $1 go on as decideRunSQL does, into its group $3
// (with cancel-in-progress $5): it waits there, saying so ($4), until
// settleJobGroup releases it.
const decideJoinSQL = `
UPDATE jobs SET decided = true,
       spec = CASE WHEN $2::jsonb IS NULL THEN spec ELSE jsonb_set(spec, '{need_results}', $2::jsonb) END,
       concurrency_group = $3, concurrency_waiting = true, concurrency_at = clock_timestamp(), reason = $4,
       concurrency_cancel = $5
WHERE id = $1 AND state = 'PENDING'`

// jobGroupSQL reads the open jobs of group $2 of project $1 in the order
// they joined it. A job not waiting holds the group: queued, running, or
// released and about to be queued (a matrix's max-parallel).
const jobGroupSQL = `
SELECT j.id, j.run_id, r.number, j.name, j.state, j.concurrency_waiting, j.concurrency_cancel, j.cancel_requested
FROM jobs j JOIN runs r ON r.id = j.run_id
WHERE j.project_id = $1 AND j.concurrency_group = $2 AND j.state IN ('PENDING', 'QUEUED', 'RUNNING')
ORDER BY j.concurrency_at, j.id`

// releaseJobSQL lets waiting job $1 go on; advanceRun then queues it.
const releaseJobSQL = `
UPDATE jobs SET concurrency_waiting = false, reason = NULL
WHERE id = $1 AND state = 'PENDING' AND concurrency_waiting`

// endGroupJobSQL cancels the jobs $1, not running, that are in the state
// they were read in ($3: a row that became queued meanwhile is not
// waited for, whose claim may hold it and wait for the run's row), with
// reason $2.
const endGroupJobSQL = `
UPDATE jobs SET state = 'CANCELED', reason = $2, finished_at = now()
WHERE id = ANY ($1) AND state = $3 AND state IN ('PENDING', 'QUEUED')`

// lockQueuedJobSQL locks job $1 when it is queued (its row before its run's).
const lockQueuedJobSQL = `SELECT 1 FROM jobs WHERE id = $1 AND state = 'QUEUED' FOR UPDATE`

// runJobGroupsSQL reads run $1's project and the groups its jobs joined.
const runJobGroupsSQL = `
SELECT project_id, ARRAY(SELECT DISTINCT concurrency_group FROM jobs
                         WHERE run_id = $1 AND concurrency_group IS NOT NULL)
FROM runs WHERE id = $1`

// waitingJobGroupsSQL lists the groups with a waiting job, for the sweeper.
const waitingJobGroupsSQL = `
SELECT DISTINCT project_id, concurrency_group FROM jobs
WHERE concurrency_group IS NOT NULL AND state = 'PENDING' AND concurrency_waiting`

// groupName evaluates a concurrency group's template with vars: lower
// case, 1 to 400 characters, and an untrusted run's its own ref's
// (untrusted:<ref>:<group>): a fork's pipeline names it, and must never
// cancel, supersede or hold up a trusted run or job, nor another pull
// request's.
func groupName(template string, vars map[string]any, trusted bool, budget *int) (string, error) {
	g, err := evalTemplate(template, vars, budget)
	if err != nil {
		return "", err
	}
	switch g = strings.ToLower(strings.TrimSpace(g)); {
	case g == "" || len(g) > 400:
		return "", fmt.Errorf("is %q here: a group is 1 to 400 characters", domain.Truncate(g, 100))
	case !domain.PlainText(g):
		// The database holds no NUL; the dashboard shows one line.
		return "", fmt.Errorf("is %q here: a group is text without control characters", g)
	}
	switch {
	case !trusted:
		g = untrustedGroupPrefix(refOf(vars)) + g
	case strings.HasPrefix(g, "untrusted:"):
		// It would be an untrusted run's group.
		return "", fmt.Errorf("is %q here: a group may not start with \"untrusted:\"", g)
	}
	return g, nil
}

// untrustedGroupPrefix is what an untrusted run of ref's groups begin
// with.
func untrustedGroupPrefix(ref string) string { return "untrusted:" + ref + ":" }

// refOf is the ref in a run's facts (vars' forgeci).
func refOf(vars map[string]any) string {
	f, _ := vars["forgeci"].(map[string]any)
	ref, _ := f["ref"].(string)
	return ref
}

// evalTemplate evaluates a template the control plane fills in, charging
// its work to budget (when not nil).
func evalTemplate(template string, vars map[string]any, budget *int) (string, error) {
	tpl, errs := expr.ParseTemplate(template)
	if len(errs) > 0 {
		return "", errors.New(errs[0].Message)
	}
	c := &expr.Context{Vars: vars, Budget: conditionWork}
	if budget != nil {
		c.Budget = min(*budget, conditionWork)
	}
	v, err := tpl.Eval(c)
	if budget != nil {
		*budget -= c.Work
	}
	return v, err
}

// evalJobGroup is job u's group and cancel-in-progress, from its
// templates, facts and needs.
func evalJobGroup(u undecided, needs map[string]domain.NeedResult, budget *int) (string, bool, error) {
	if *budget <= 0 {
		return "", false, fmt.Errorf("concurrency: the conditions and outputs read with this group are too much work together (over %d units)", decisionWork)
	}
	vars := decisionVars(u, needs)
	g, err := groupName(u.group, vars, u.trusted, budget)
	if err != nil {
		return "", false, fmt.Errorf("concurrency.group: %w", err)
	}
	cancel, err := cancelOf(u.cancel, u.cancelExpr, vars, budget)
	return g, cancel, err
}

// cancelOf is a cancel-in-progress: static, or its expression's value.
func cancelOf(static bool, expression string, vars map[string]any, budget *int) (bool, error) {
	switch expression {
	case "":
		return static, nil
	case "true", "false": // filled in by the parser (a matrix value)
		return expression == "true", nil
	}
	tpl, errs := expr.ParseTemplate(expression)
	if len(errs) > 0 || len(tpl.Exprs()) != 1 {
		return false, fmt.Errorf("concurrency.cancel-in-progress: %q is not one expression", expression)
	}
	c := &expr.Context{Vars: vars, Budget: conditionWork}
	if budget != nil {
		c.Budget = min(*budget, conditionWork)
	}
	v, err := tpl.Exprs()[0].Eval(c)
	if budget != nil {
		*budget -= c.Work
	}
	if err != nil {
		return false, fmt.Errorf("concurrency.cancel-in-progress: %w", err)
	}
	return expr.Truthy(v), nil
}

// groupMember is a row of jobGroupSQL.
type groupMember struct {
	id, runID, name, state       string
	number                       int64
	waiting, cancel, cancelAsked bool
}

// groupAction is one step of settling a group: what to do to which jobs
// (of one run, in one state).
type groupAction struct {
	kind    string // "release", "supersede" or "cancel"
	targets []groupMember
	by      groupMember
}

// nextGroupAction decides the next step for a group's members, or
// reports there is none: older waiting jobs are superseded by the newest;
// the newest goes on when no job holds the group, or, with
// cancel-in-progress, cancels the jobs that hold it.
func nextGroupAction(ms []groupMember) (groupAction, bool) {
	var waiting, holding []groupMember
	for _, m := range ms {
		if m.waiting {
			waiting = append(waiting, m)
		} else {
			holding = append(holding, m)
		}
	}
	if len(waiting) == 0 {
		return groupAction{}, false
	}
	newest := waiting[len(waiting)-1]
	if len(waiting) > 1 {
		// Every older one of the first's run at once (a matrix's
		// combinations may share a group).
		var older []groupMember
		for _, w := range waiting[:len(waiting)-1] {
			if w.runID == waiting[0].runID {
				older = append(older, w)
			}
		}
		return groupAction{kind: "supersede", targets: older, by: newest}, true
	}
	if len(holding) == 0 {
		return groupAction{kind: "release", targets: []groupMember{newest}}, true
	}
	if newest.cancel {
		for _, h := range holding {
			if h.state != domain.JobRunning || !h.cancelAsked {
				return groupAction{kind: "cancel", targets: []groupMember{h}, by: newest}, true
			}
		}
	}
	return groupAction{}, false
}

// settleJobGroup takes the steps group needs, one transaction each, then
// settles the groups of the runs whose jobs it ended (their dependants
// may have joined other groups, the runs ended).
func (s *Store) settleJobGroup(ctx context.Context, projectID, group string) error {
	ended, err := s.settleJobGroupSteps(ctx, projectID, group)
	errs := []error{err}
	for runID := range ended {
		errs = append(errs, s.afterRun(ctx, runID))
	}
	return errors.Join(errs...)
}

// maxGroupSteps bounds one settling: each step ends, releases or asks a
// job to stop (a group's jobs of one run together), and one whose jobs
// changed meanwhile is read again.
const maxGroupSteps = 1000

func (s *Store) settleJobGroupSteps(ctx context.Context, projectID, group string) (map[string]bool, error) {
	ended := map[string]bool{}
	for range maxGroupSteps {
		var act groupAction
		var ok bool
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, jobGroupLockSQL, projectID, group); err != nil {
				return fmt.Errorf("lock concurrency group: %w", err)
			}
			rows, err := tx.Query(ctx, jobGroupSQL, projectID, group)
			if err != nil {
				return fmt.Errorf("concurrency group %s: %w", group, err)
			}
			ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (groupMember, error) {
				var m groupMember
				return m, row.Scan(&m.id, &m.runID, &m.number, &m.name, &m.state, &m.waiting, &m.cancel, &m.cancelAsked)
			})
			if err != nil {
				return fmt.Errorf("concurrency group %s: %w", group, err)
			}
			if act, ok = nextGroupAction(ms); !ok {
				return nil
			}
			return applyGroupAction(ctx, tx, group, act)
		})
		if err != nil || !ok {
			return ended, err
		}
		if act.kind == "release" {
			s.signalQueued()
		} else {
			ended[act.targets[0].runID] = true
		}
	}
	return ended, fmt.Errorf("concurrency group %s: still unsettled after %d steps", group, maxGroupSteps)
}

// applyGroupAction takes one step in tx, which holds the group's lock.
func applyGroupAction(ctx context.Context, tx pgx.Tx, group string, act groupAction) error {
	t := act.targets[0]
	ids := make([]string, len(act.targets))
	for i, m := range act.targets {
		ids[i] = m.id
	}
	switch {
	case act.kind == "release":
		if _, err := tx.Exec(ctx, lockRunSQL, t.runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		if _, err := tx.Exec(ctx, releaseJobSQL, t.id); err != nil {
			return fmt.Errorf("release job: %w", err)
		}
	case t.state == domain.JobRunning:
		// Its runner hears it on its next heartbeat, stops and completes
		// canceled; that end settles the group.
		_, err := tx.Exec(ctx, failFastRunningSQL, t.id)
		return err
	default:
		if t.state == domain.JobQueued {
			if _, err := tx.Exec(ctx, lockQueuedJobSQL, t.id); err != nil {
				return fmt.Errorf("lock job: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, lockRunSQL, t.runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		why := fmt.Sprintf("superseded by %s of #%d", act.by.name, act.by.number)
		if act.kind == "cancel" {
			why = fmt.Sprintf("canceled by %s of #%d (concurrency group %s)", act.by.name, act.by.number, group)
		}
		if _, err := tx.Exec(ctx, endGroupJobSQL, ids, domain.Truncate(why, 300), t.state); err != nil {
			return fmt.Errorf("cancel job: %w", err)
		}
	}
	return advanceRun(ctx, tx, t.runID)
}

// settleRunJobs settles the groups run runID's jobs joined.
func (s *Store) settleRunJobs(ctx context.Context, runID string) error {
	var projectID string
	var groups []string
	if err := s.pool.QueryRow(ctx, runJobGroupsSQL, runID).Scan(&projectID, &groups); err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	var errs []error
	for _, g := range groups {
		errs = append(errs, s.settleJobGroup(ctx, projectID, g))
	}
	return errors.Join(errs...)
}

// settleWaitingJobGroups settles every group with a waiting job: what a
// crash between a job's end or joining and its settling left waiting.
func (s *Store) settleWaitingJobGroups(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, waitingJobGroupsSQL)
	if err != nil {
		return fmt.Errorf("job concurrency groups: %w", err)
	}
	type group struct{ project, name string }
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (group, error) {
		var g group
		return g, row.Scan(&g.project, &g.name)
	})
	if err != nil {
		return fmt.Errorf("job concurrency groups: %w", err)
	}
	var errs []error
	for _, g := range groups {
		errs = append(errs, s.settleJobGroup(ctx, g.project, g.name))
	}
	return errors.Join(errs...)
}
