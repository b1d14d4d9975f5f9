package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Environments (docs/deployments.md): a project's deploy targets, with
// the rules that gate the jobs naming them. The gate itself is decided
// with the job's condition, when its needs end (deploygate.go).

// Environment is an environment's rules.
type Environment struct {
	Name string `json:"name"`
	// ReviewerRole, when set (write or admin), makes every deployment
	// wait until a member of at least that role approves it.
	ReviewerRole string `json:"reviewer_role,omitempty"`
	// AllowedRefs are the refs that may deploy (none: any). A pattern
	// that starts with refs/ is matched against the whole ref, any other
	// against a branch's name; * does not cross a /, ** does.
	AllowedRefs []string `json:"allowed_refs"`
	// PreventSelfReview: the member whose run it is may not approve its
	// deployment (where the ref is the submitter's to name, the one gate
	// they cannot pass alone).
	PreventSelfReview bool `json:"prevent_self_review"`
	// Secrets are the names of its secrets (shown to project admins only,
	// as the project's).
	Secrets   []string  `json:"secrets,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

const (
	maxAllowedRefs  = 50
	maxEnvironments = 100
)

// upsertEnvironmentSQL writes environment $2's rules; updated_at moves
// only when they change: the deployments let through under the rules of
// an earlier time are gated again (jobs.deploy_rules_at).
const upsertEnvironmentSQL = `
INSERT INTO environments (project_id, name, reviewer_role, allowed_refs, prevent_self_review)
VALUES ($1, $2, nullif($3, ''), $4, $5)
ON CONFLICT (project_id, name) DO UPDATE
SET reviewer_role = nullif($3, ''), allowed_refs = $4, prevent_self_review = $5,
    updated_at = CASE WHEN (environments.reviewer_role, environments.allowed_refs, environments.prevent_self_review)
                           IS DISTINCT FROM (nullif($3, ''), $4::text[], $5::boolean)
                      THEN now() ELSE environments.updated_at END`

const countEnvironmentsSQL = `SELECT count(*) FROM environments WHERE project_id = $1 AND name <> $2`

// listEnvironmentsSQL is project $1's environments with their secrets'
// names.
const listEnvironmentsSQL = `
SELECT e.name, coalesce(e.reviewer_role, ''), e.allowed_refs, e.prevent_self_review, e.updated_at,
       coalesce((SELECT array_agg(s.name ORDER BY s.name) FROM project_secrets s
                 WHERE s.project_id = e.project_id AND s.environment = e.name), '{}')
FROM environments e WHERE e.project_id = $1 ORDER BY e.name`

// deleteEnvironmentSQL deletes environment $2 of project $1 and its
// secrets, which would be given to any later environment of that name.
const deleteEnvironmentSQL = `
WITH secrets AS (DELETE FROM project_secrets WHERE project_id = $1 AND environment = $2)
DELETE FROM environments WHERE project_id = $1 AND name = $2`

// CheckEnvironmentName folds an environment's name to lower case and
// checks it.
func CheckEnvironmentName(name string) (string, error) {
	n := strings.ToLower(name)
	if !domain.EnvironmentNameRE().MatchString(n) {
		return "", domain.Errorf(domain.EInvalid, "environment name %q must be 1 to 64 letters, digits, _ . or -, starting with a letter or digit", name)
	}
	return n, nil
}

func checkEnvironment(e *Environment) error {
	var err error
	if e.Name, err = CheckEnvironmentName(e.Name); err != nil {
		return err
	}
	if e.PreventSelfReview && e.ReviewerRole == "" {
		return domain.Errorf(domain.EInvalid, "prevent_self_review needs a reviewer_role: without reviewers nobody reviews")
	}
	if e.ReviewerRole != "" && e.ReviewerRole != RoleWrite && e.ReviewerRole != RoleAdmin {
		return domain.Errorf(domain.EInvalid, "reviewer_role is %s or %s (or empty for none), not %q", RoleWrite, RoleAdmin, e.ReviewerRole)
	}
	if len(e.AllowedRefs) > maxAllowedRefs {
		return domain.Errorf(domain.EInvalid, "allowed_refs holds %d patterns, at most %d", len(e.AllowedRefs), maxAllowedRefs)
	}
	for _, p := range e.AllowedRefs {
		if p == "" || len(p) > 255 || !doublestar.ValidatePattern(p) || strings.ContainsAny(p, " :\\\x00") {
			return domain.Errorf(domain.EInvalid, "allowed_refs: %q is not a ref pattern (1 to 255 characters: a branch such as main or release/*, or a ref such as refs/tags/v*)", p)
		}
	}
	if e.AllowedRefs == nil {
		e.AllowedRefs = []string{}
	}
	return nil
}

// SetEnvironment makes or changes an environment; u must be an admin of
// the project.
func (s *Store) SetEnvironment(ctx context.Context, u User, project string, e Environment) (Environment, error) {
	if err := checkEnvironment(&e); err != nil {
		return e, err
	}
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return e, err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, p.ID, RankAdmin, "project "+project); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, lockProjectSQL, p.ID); err != nil {
			return fmt.Errorf("lock project: %w", err)
		}
		var n int
		if err := tx.QueryRow(ctx, countEnvironmentsSQL, p.ID, e.Name).Scan(&n); err != nil {
			return fmt.Errorf("count environments: %w", err)
		}
		if n >= maxEnvironments {
			return domain.Errorf(domain.EConflict, "project %s has %d environments, the most it may", project, maxEnvironments)
		}
		if _, err := tx.Exec(ctx, upsertEnvironmentSQL, p.ID, e.Name, e.ReviewerRole, e.AllowedRefs, e.PreventSelfReview); err != nil {
			return err
		}
		// Deployments let through under other rules are gated again
		// (deployregate.go): the sweeper looks too, should this process
		// not get to it.
		noteSweep(tx)
		return nil
	})
	if err != nil {
		return e, err
	}
	if _, err := s.RegateStale(ctx, p.ID, e.Name, regateNow); err != nil {
		return e, fmt.Errorf("environment %s is saved, but gating its deployments again failed (the sweeper tries again): %w", e.Name, err)
	}
	list, err := s.Environments(ctx, u, project)
	for _, got := range list {
		if got.Name == e.Name {
			return got, err
		}
	}
	return e, err
}

// Environments lists a project's environments; any member may read them,
// its admins with their secrets' names.
func (s *Store) Environments(ctx context.Context, u User, project string) ([]Environment, error) {
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, listEnvironmentsSQL, p.ID)
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Environment, error) {
		var e Environment
		err := row.Scan(&e.Name, &e.ReviewerRole, &e.AllowedRefs, &e.PreventSelfReview, &e.UpdatedAt, &e.Secrets)
		if p.Role != RoleAdmin {
			e.Secrets = nil
		}
		return e, err
	})
}

// DeleteEnvironment removes an environment and its secrets; its
// deployments stay in the history. u must be an admin of the project.
func (s *Store) DeleteEnvironment(ctx context.Context, u User, project, name string) error {
	n, err := CheckEnvironmentName(name)
	if err != nil {
		return err
	}
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, p.ID, RankAdmin, "project "+project); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, deleteEnvironmentSQL, p.ID, n)
		if err != nil {
			return fmt.Errorf("delete environment: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return domain.Errorf(domain.ENotFound, "environment %s not found", n)
		}
		noteSweep(tx) // its deployments are gated again: the sweeper looks too
		return nil
	})
	if err != nil {
		return err
	}
	// Its deployments let through are gated again, without its rules.
	if _, err := s.RegateStale(ctx, p.ID, n, regateNow); err != nil {
		return fmt.Errorf("environment %s is deleted, but gating its deployments again failed (the sweeper tries again): %w", n, err)
	}
	return nil
}

// refAllowed reports whether ref may deploy under patterns (none: any).
func refAllowed(patterns []string, ref string) bool {
	if len(patterns) == 0 {
		return true
	}
	branch, isBranch := strings.CutPrefix(ref, "refs/heads/")
	for _, p := range patterns {
		target, ok := ref, true
		if !strings.HasPrefix(p, "refs/") {
			target, ok = branch, isBranch
		}
		if m, err := doublestar.Match(p, target); ok && err == nil && m {
			return true
		}
	}
	return false
}
