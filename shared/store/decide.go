package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// Job conditions are decided here, by the control plane, when a job's
// needs have all ended (docs/pipeline.md, "Conditions"): the facts a job's
// if: reads (needs.<job>.result and .outputs, forgeci.*, the status
// functions) exist only then. advanceRun asks decidableSQL for such jobs
// and hands them to decideJobs, in its transaction, under the run's lock.

// jobCondition is what the store keeps of a job's if:.
type jobCondition struct {
	group          string
	condition      *string
	status         bool // calls a status function
	survivesCancel bool // calls always() or cancelled()
	// concurrency is the job's concurrency group's template ("" none).
	concurrency      string
	cancelInProgress bool
	cancelExpr       string
}

func conditionOf(j NewJob) jobCondition {
	c := jobCondition{group: j.Group}
	if j.Concurrency != nil {
		c.concurrency, c.cancelInProgress, c.cancelExpr = j.Concurrency.Group, j.Concurrency.CancelInProgress, j.Concurrency.CancelExpr
	}
	if c.group == "" {
		c.group = j.Name
	}
	if j.If == "" {
		return c
	}
	cond := j.If
	c.condition = &cond
	// The parser has checked it: it parses.
	if e, err := expr.Parse(cond); err == nil {
		c.status = e.CallsStatus()
		c.survivesCancel = e.Calls("always") || e.Calls("cancelled")
	}
	return c
}

// decidableSQL lists the pending jobs of run $1 with a condition, a
// needs context, a concurrency group or an environment whose needs have all
// ended (and not while the run or its deployment waits for approval).
const decidableSQL = `
SELECT d.id, coalesce(d.condition, ''), d.condition_status, d.reads_needs, d.needs,
       CASE WHEN r.vars IS NULL THEN d.spec->'run' ELSE jsonb_set(d.spec->'run', '{vars}', r.vars) END, r.cancel_requested,
       coalesce(d.concurrency_template, ''), d.concurrency_cancel, coalesce(d.concurrency_cancel_expr, ''), d.trusted,
       coalesce(d.environment_template, ''), coalesce(d.spec->'environment'->>'url', ''), coalesce(d.deploy_state, '')
FROM jobs d JOIN runs r ON r.id = d.run_id
WHERE d.run_id = $1 AND d.state = 'PENDING' AND NOT d.decided
  AND (d.condition IS NOT NULL OR d.reads_needs OR d.concurrency_template IS NOT NULL OR d.environment_template IS NOT NULL)
  AND d.deploy_state IS DISTINCT FROM 'waiting'
  AND r.approval <> 'pending' AND NOT r.concurrency_waiting
  AND NOT EXISTS (SELECT 1 FROM jobs n WHERE n.run_id = d.run_id AND n.name = ANY (d.needs)
                  AND n.state IN ('PENDING', 'QUEUED', 'RUNNING'))
ORDER BY d.id`

// decisionJobsSQL reads the jobs of run $1 as conditions see them, in the
// order they ended (a matrix's later outputs replace earlier ones).
const decisionJobsSQL = `
SELECT name, coalesce(job_group, name), needs, state, continue_on_error
FROM jobs WHERE run_id = $1 ORDER BY finished_at NULLS LAST, id`

// decisionOutputsSQL reads the outputs of the jobs of run $1 named in $2.
const decisionOutputsSQL = `SELECT name, outputs FROM jobs WHERE run_id = $1 AND name = ANY ($2) AND outputs IS NOT NULL`

// decideRunSQL lets job $1 be queued, with the needs context $2 (or
// none) in its spec.
const decideRunSQL = `
UPDATE jobs SET decided = true,
       spec = CASE WHEN $2::jsonb IS NULL THEN spec ELSE jsonb_set(spec, '{need_results}', $2::jsonb) END
WHERE id = $1 AND state = 'PENDING'`

// decideEndSQL ends job $1 without running it: state $2, reason $3.
const decideEndSQL = `UPDATE jobs SET state = $2, reason = $3, finished_at = now() WHERE id = $1 AND state = 'PENDING'`

// The work conditions may do (expr's units, about 64M a second; reading
// outputs costs a unit a byte): they are evaluated while the run's row is
// locked, in the transaction of the completion that ended their needs.
// One condition may read a few large outputs; all that one completion
// decides, about a quarter of a second. maxNeedsContext bounds the needs
// context put into a job's spec (and so its claim).
const (
	conditionWork   = 4 << 20
	decisionWork    = 16 << 20
	maxNeedsContext = 1 << 20
)

// undecided is a row of decidableSQL.
type undecided struct {
	id, condition      string
	status, readsNeeds bool
	needs              []string
	facts              json.RawMessage
	cancelRequested    bool
	group              string // the concurrency group's template
	cancel             bool   // its cancel-in-progress, or
	cancelExpr         string // that as an expression
	trusted            bool
	envTemplate        string // the environment's name, a template ("" none)
	envURL             string // its URL, a template
	deployState        string // "", or approved once it may deploy
}

func scanUndecided(rows pgx.Rows) ([]undecided, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (undecided, error) {
		var u undecided
		err := row.Scan(&u.id, &u.condition, &u.status, &u.readsNeeds, &u.needs, &u.facts, &u.cancelRequested,
			&u.group, &u.cancel, &u.cancelExpr, &u.trusted, &u.envTemplate, &u.envURL, &u.deployState)
		return u, err
	})
}

// runJob is a job of the run as decisionJobsSQL reads it.
type runJob struct {
	name, group, state string
	needs              []string
	continueOnError    bool
	outputs            map[string]string
}

// passed: the job's dependants see a success.
func (j runJob) passed() bool {
	return j.state == domain.JobPassed || j.state == domain.JobFailed && j.continueOnError
}

// failed: failure() is true after it.
func (j runJob) failed() bool {
	return j.state == domain.JobAborted || j.state == domain.JobFailed && !j.continueOnError
}

// result is needs.<job>.result of one job.
func (j runJob) result() string {
	switch {
	case j.passed():
		return "success"
	case j.failed():
		return "failure"
	case j.state == domain.JobCanceled:
		return "cancelled"
	}
	return "skipped"
}

// decideJobs decides each job of list, in the transaction that holds the
// run's lock: a condition that holds lets the job be queued (with its
// needs context when its runner reads it), one that does not ends it
// SKIPPED, and one that cannot be evaluated ends it FAILED.
// decider is what one advanceRun's decisions share: the work they may
// still do, and the outputs of the jobs they read, read once.
type decider struct {
	budget  int
	outputs map[string]map[string]string
	envs    map[string]envRule // the run's project's environments, read once
}

func newDecider() *decider {
	return &decider{budget: decisionWork, outputs: map[string]map[string]string{}}
}

func decideJobs(ctx context.Context, tx pgx.Tx, runID string, list []undecided, d *decider) error {
	rows, err := tx.Query(ctx, decisionJobsSQL, runID)
	if err != nil {
		return fmt.Errorf("read jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runJob, error) {
		var j runJob
		err := row.Scan(&j.name, &j.group, &j.needs, &j.state, &j.continueOnError)
		return j, err
	})
	if err != nil {
		return fmt.Errorf("read jobs: %w", err)
	}
	if err := d.readOutputs(ctx, tx, runID, list); err != nil {
		return err
	}
	if err := d.readEnvRules(ctx, tx, runID, list); err != nil {
		return err
	}
	byName := make(map[string]runJob, len(jobs))
	for i, j := range jobs {
		jobs[i].outputs = d.outputs[j.name]
		byName[j.name] = jobs[i]
	}
	b := &pgx.Batch{}
	for _, u := range list {
		queueDecision(b, u, jobs, byName, d)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("decide jobs: %w", err)
	}
	return nil
}

// readOutputs reads the outputs of the jobs list needs that it has not
// read yet, charging their size to the budget.
func (d *decider) readOutputs(ctx context.Context, tx pgx.Tx, runID string, list []undecided) error {
	var names []string
	for _, u := range list {
		for _, n := range u.needs {
			if _, ok := d.outputs[n]; !ok {
				d.outputs[n] = nil
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, decisionOutputsSQL, runID, names)
	if err != nil {
		return fmt.Errorf("read outputs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var raw []byte
		if err := rows.Scan(&name, &raw); err != nil {
			return fmt.Errorf("read outputs: %w", err)
		}
		d.budget -= len(raw)
		var m map[string]string
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("outputs of %s: %w", name, err)
		}
		d.outputs[name] = m
	}
	return rows.Err()
}

// queueDecision evaluates u's condition and queues the write it leads to.
func queueDecision(b *pgx.Batch, u undecided, jobs []runJob, byName map[string]runJob, d *decider) {
	needs := needsContext(u.needs, jobs)
	if u.condition != "" {
		ok, err := evalCondition(u, needs, byName, &d.budget)
		switch {
		case err != nil:
			b.Queue(decideEndSQL, u.id, domain.JobFailed, domain.Truncate("if: "+u.condition+": "+err.Error(), 300))
			return
		case !ok:
			b.Queue(decideEndSQL, u.id, domain.JobSkipped, domain.Truncate("if: "+u.condition+" was false", 300))
			return
		}
	}
	var ctxJSON []byte
	if u.readsNeeds {
		// Only strings and maps of strings: Marshal cannot fail.
		ctxJSON, _ = json.Marshal(needs)
		if len(ctxJSON) > maxNeedsContext {
			b.Queue(decideEndSQL, u.id, domain.JobFailed, fmt.Sprintf(
				"its needs' outputs are %d bytes of JSON, over the %d a job may read", len(ctxJSON), maxNeedsContext))
			return
		}
	}
	if u.envTemplate != "" && u.deployState == "" && !d.deployGate(b, u, needs) {
		return
	}
	if u.group == "" {
		b.Queue(decideRunSQL, u.id, ctxJSON)
		return
	}
	group, cancel, err := evalJobGroup(u, needs, &d.budget)
	if err != nil {
		b.Queue(decideEndSQL, u.id, domain.JobFailed, domain.Truncate(err.Error(), 300))
		return
	}
	b.Queue(decideJoinSQL, u.id, ctxJSON, group, waitingReason(group), cancel)
}

// needsContext is needs.<job> for each job named in needs, by its name
// in the file: a matrix's combinations together (failure if one failed,
// else cancelled if one was, else skipped if all were, else success;
// their outputs merged, a later-ending one's replacing, as jobs is in the
// order they ended).
func needsContext(needs []string, jobs []runJob) map[string]domain.NeedResult {
	results := map[string][]string{}
	out := map[string]domain.NeedResult{}
	for _, j := range jobs {
		if !slices.Contains(needs, j.name) {
			continue
		}
		results[j.group] = append(results[j.group], j.result())
		r, ok := out[j.group]
		if !ok {
			r = domain.NeedResult{Outputs: map[string]string{}}
		}
		maps.Copy(r.Outputs, j.outputs)
		out[j.group] = r
	}
	for group, rs := range results {
		r := out[group]
		switch {
		case slices.Contains(rs, "failure"):
			r.Result = "failure"
		case slices.Contains(rs, "cancelled"):
			r.Result = "cancelled"
		case !slices.ContainsFunc(rs, func(s string) bool { return s != "skipped" }):
			r.Result = "skipped"
		default:
			r.Result = "success"
		}
		out[group] = r
	}
	return out
}

// evalCondition evaluates u's condition: the status functions answer for
// its needs (failure() for any job upstream) and the run; a condition
// without one holds only if the needs passed, as GitHub's implicit
// success() &&.
func evalCondition(u undecided, needs map[string]domain.NeedResult, byName map[string]runJob, budget *int) (bool, error) {
	if *budget <= 0 {
		return false, fmt.Errorf("the conditions and outputs read with this one's are too much work together (over %d units)", decisionWork)
	}
	e, perr := expr.Parse(u.condition)
	if perr != nil {
		return false, perr
	}
	success := !u.cancelRequested
	for _, n := range u.needs {
		if j, ok := byName[n]; ok && !j.passed() {
			success = false
		}
	}
	failure := upstreamFailed(u.needs, byName)
	status := func(name string) bool {
		switch name {
		case "success":
			return success
		case "failure":
			return failure
		case "cancelled":
			return u.cancelRequested
		}
		return true
	}
	c := &expr.Context{Vars: decisionVars(u, needs), Status: status, Budget: min(*budget, conditionWork)}
	v, err := e.Eval(c)
	*budget -= c.Work
	if err != nil {
		return false, err
	}
	if !u.status && !success {
		return false, nil
	}
	return expr.Truthy(v), nil
}

// decisionVars are the contexts a job's if: and concurrency group read.
func decisionVars(u undecided, needs map[string]domain.NeedResult) map[string]any {
	var facts map[string]any
	if len(u.facts) > 0 {
		_ = json.Unmarshal(u.facts, &facts)
	}
	needsVar := map[string]any{}
	for k, v := range needs {
		outs := map[string]any{}
		for ok, ov := range v.Outputs {
			outs[ok] = ov
		}
		needsVar[k] = map[string]any{"result": v.Result, "outputs": outs}
	}
	vars := factContexts(facts)
	vars["needs"] = needsVar
	return vars
}

// upstreamFailed reports whether a job needs names, or one they need in
// turn, failed.
func upstreamFailed(needs []string, byName map[string]runJob) bool {
	seen := map[string]bool{}
	stack := append([]string{}, needs...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		j, ok := byName[n]
		if !ok {
			continue
		}
		if j.failed() {
			return true
		}
		stack = append(stack, j.needs...)
	}
	return false
}
