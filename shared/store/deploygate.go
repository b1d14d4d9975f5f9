package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// The deploy gate: when a job that names an environment has had its needs
// end and its condition hold, its environment is evaluated and its rules
// applied, in advanceRun's transaction under the run's lock. A ref the
// environment does not allow fails the job; reviewers make it wait, with
// a deployment row saying so, until DecideDeployment; otherwise it goes
// on at once. Every outcome is a deployment row: the history.

// envRulesSQL reads the rules of the environments of run $1's project.
const envRulesSQL = `
SELECT e.name, coalesce(e.reviewer_role, ''), e.allowed_refs, e.updated_at
FROM environments e JOIN runs r ON r.project_id = e.project_id WHERE r.id = $1`

// insertDeploymentSQL records job $1's deployment to environment $2
// (URL $3) with decision $4 and reason $5, the ref and commit its run's.
// An untrusted run's URL is not kept: a fork's pipeline names it, and the
// environment's history would show it as a link beside the team's own.
const insertDeploymentSQL = `
INSERT INTO deployments (project_id, environment, run_id, job_id, run_number, job_name, trigger, dirty,
                         ref, sha, url, decision, reason, decided_at, inputs)
SELECT r.project_id, $2, r.id, j.id, r.number, j.name, r.trigger, r.git_dirty,
       coalesce(r.git_ref, ''), coalesce(r.git_sha, ''), CASE WHEN r.trusted THEN nullif($3, '') END, $4, nullif($5, ''),
       CASE WHEN $4 IN ('automatic', 'refused') THEN now() END, r.inputs
FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id = $1`

// deployWaitSQL holds job $1 for a review of its deployment to $2.
const deployWaitSQL = `
UPDATE jobs SET environment = $2, deploy_state = 'waiting', reason = $3 WHERE id = $1 AND state = 'PENDING'`

// deployGoSQL lets job $1 deploy to $2 without a review, under the rules
// of time $3 (NULL: the environment has none).
const deployGoSQL = `
UPDATE jobs SET environment = $2, deploy_state = 'approved', deploy_rules_at = $3 WHERE id = $1 AND state = 'PENDING'`

// envRule is an environment's rules as the gate reads them.
type envRule struct {
	reviewerRole string
	allowedRefs  []string
	at           *time.Time // when they were written (nil: no such environment)
}

// readEnvRules reads the rules of run's project, once per decider.
func (d *decider) readEnvRules(ctx context.Context, tx pgx.Tx, runID string, list []undecided) error {
	if d.envs != nil {
		return nil
	}
	need := false
	for _, u := range list {
		need = need || (u.envTemplate != "" && u.deployState == "")
	}
	if !need {
		return nil
	}
	rows, err := tx.Query(ctx, envRulesSQL, runID)
	if err != nil {
		return fmt.Errorf("read environments: %w", err)
	}
	d.envs = map[string]envRule{}
	defer rows.Close()
	for rows.Next() {
		var name string
		var r envRule
		if err := rows.Scan(&name, &r.reviewerRole, &r.allowedRefs, &r.at); err != nil {
			return fmt.Errorf("read environments: %w", err)
		}
		d.envs[name] = r
	}
	return rows.Err()
}

// deployGate applies u's environment's rules; it reports whether u may
// go on to be queued now.
func (d *decider) deployGate(b *pgx.Batch, u undecided, needs map[string]domain.NeedResult) bool {
	vars := decisionVars(u, needs)
	name, err := d.evalText(u.envTemplate, vars)
	if err == nil {
		name, err = CheckEnvironmentName(strings.TrimSpace(name))
	}
	if err != nil {
		b.Queue(decideEndSQL, u.id, domain.JobFailed, domain.Truncate("environment: "+err.Error(), 300))
		return false
	}
	url := ""
	if u.envURL != "" {
		if url, err = d.evalText(u.envURL, vars); err != nil || !showableURL(url) {
			url = "" // a URL is shown, never used: a bad one is only hidden
		}
	}
	rule := d.envs[name]
	ref := refOf(vars)
	switch {
	case !u.trusted:
		// A fork's code, or a member's without the secrets permission,
		// is no deployment, whatever its ref: it would run as one (in the
		// history, on the target's network) without the right to.
		// It fails: a skipped check passes GitHub's branch protection.
		reason := fmt.Sprintf("an untrusted run (a fork's pull request, or a member's without the secrets permission) does not deploy to %s", name)
		b.Queue(insertDeploymentSQL, u.id, name, url, "refused", reason)
		b.Queue(decideEndSQL, u.id, domain.JobFailed, domain.Truncate(reason, 300))
		return false
	case !refAllowed(rule.allowedRefs, ref):
		reason := fmt.Sprintf("environment %s does not allow %s to deploy (allowed: %s)", name, refOrNone(ref), strings.Join(rule.allowedRefs, ", "))
		b.Queue(insertDeploymentSQL, u.id, name, url, "refused", reason)
		b.Queue(decideEndSQL, u.id, domain.JobFailed, domain.Truncate(reason, 300))
		return false
	case rule.reviewerRole != "":
		b.Queue(insertDeploymentSQL, u.id, name, url, "waiting", "")
		b.Queue(deployWaitSQL, u.id, name, "waiting for a review to deploy to "+name)
		return false
	}
	b.Queue(insertDeploymentSQL, u.id, name, url, "automatic", "")
	b.Queue(deployGoSQL, u.id, name, rule.at)
	return true
}

// showableURL: an http(s) URL of at most 2 KiB, valid UTF-8 without
// control characters (the database refuses a NUL, and the history shows
// it as a link).
func showableURL(s string) bool {
	return len(s) <= 2048 && domain.PlainText(s) && (strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://"))
}

func refOrNone(ref string) string {
	if ref == "" {
		return "a run without a ref"
	}
	return ref
}

// evalText evaluates a template of the deploy gate with its budget.
func (d *decider) evalText(template string, vars map[string]any) (string, error) {
	if !strings.Contains(template, "${{") {
		return template, nil
	}
	if d.budget <= 0 {
		return "", fmt.Errorf("the conditions and outputs read with this one are too much work together (over %d units)", decisionWork)
	}
	return evalTemplate(template, vars, &d.budget)
}

// envTemplate is the name of a job's environment, as its pipeline says it.
func envTemplate(spec domain.JobSpec) string {
	if spec.Environment == nil {
		return ""
	}
	return spec.Environment.Name
}
