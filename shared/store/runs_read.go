package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Reading runs: one by ID, and the list of a user's, newest first.

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	err := row.Scan(&r.ID, &r.ProjectID, &r.Project, &r.Number, &r.State, &r.Trigger, &r.GitSHA, &r.GitRef,
		&r.GitDirty, &r.SourceDigest, &r.ManifestDigest, &r.SourceSize, &r.Trusted, &r.Scope, &r.BaseRef,
		&r.Actor, &r.Approval, &r.ApprovalBy, &r.ApprovalAt, &r.CreatedAt, &r.StartedAt, &r.FinishedAt,
		&r.Workflow, &r.HeadRef, &r.ConcurrencyGroup, &r.ConcurrencyWaiting, &r.ConcurrencyCancel, &r.Inputs, &r.SourceBy,
		&r.RetriedBy, &r.SourceToken, &r.InputsToken, &r.RunName, &r.runNameSpec, &r.Vars)
	return r, err
}

// GetRun returns a run by ID (operator tools and tests; people use GetRunAs).
func (s *Store) GetRun(ctx context.Context, runID string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, getRunSQL, runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, domain.Errorf(domain.ENotFound, "run %s not found", runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run: %w", err)
	}
	return r, nil
}

// GetRunAs returns a run u may read; any other is ENotFound.
func (s *Store) GetRunAs(ctx context.Context, u User, runID string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, getRunAsSQL, runID, u.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, domain.Errorf(domain.ENotFound, "run %s not found", runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run: %w", err)
	}
	return r, nil
}

// RunFilter selects runs, newest first.
type RunFilter struct {
	Project string // a name or ID; "" for every project the user may read
	// Branch is a branch name or a full ref; State a run state; Trigger
	// what the trigger starts with (github:push, github:pull_request,
	// schedule, dispatch, cli, retry...). "" matches any.
	Branch, State, Trigger string
	Page
}

// runStates are the states a run may be in, for filters.
var runStates = []string{domain.RunPending, domain.RunRunning, domain.RunPassed, domain.RunFailed, domain.RunCanceled, domain.RunAborted}

// check refuses a filter that can match nothing by mistake.
func (f RunFilter) check() error {
	if f.State != "" && !slices.Contains(runStates, f.State) {
		return domain.Errorf(domain.EInvalid, "state must be one of %s, not %q", strings.Join(runStates, ", "), f.State)
	}
	if len(f.Branch) > 255 || len(f.Trigger) > 255 {
		return domain.Errorf(domain.EInvalid, "branch and trigger are at most 255 characters")
	}
	return nil
}

// ListRuns returns a page of the runs u may read, newest first. A project
// named in the filter that u cannot read is ENotFound, as if it did not
// exist. The cursor is the last run's ID (the "before" of the old API).
func (s *Store) ListRuns(ctx context.Context, u User, f RunFilter) ([]Run, string, error) {
	limit, err := f.limit()
	if err != nil {
		return nil, "", err
	}
	if err := f.check(); err != nil {
		return nil, "", err
	}
	if f.Project != "" {
		if _, err := s.GetProject(ctx, u, f.Project); err != nil {
			return nil, "", err
		}
	}
	rows, err := s.pool.Query(ctx, listRunsSQL, f.Project, f.Cursor, limit+1, u.ID, f.Branch, f.State, f.Trigger)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
	if err != nil {
		return nil, "", err
	}
	if len(runs) <= limit {
		return runs, "", nil
	}
	return runs[:limit], runs[limit-1].ID, nil
}

// IsTerminalRun reports whether a run state is final.
func IsTerminalRun(state string) bool {
	switch state {
	case "PASSED", "FAILED", "CANCELED", "ABORTED":
		return true
	}
	return false
}
