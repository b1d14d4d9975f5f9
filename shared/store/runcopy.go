package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// retryOf is the NewRun that repeats a finished run (or one job of it).
func retryOf(ctx context.Context, tx pgx.Tx, runID, jobID, who string) (NewRun, error) {
	old, err := scanRun(tx.QueryRow(ctx, getRunSQL, runID))
	if err != nil {
		return NewRun{}, fmt.Errorf("retry: %w", err)
	}
	if !IsTerminalRun(old.State) {
		return NewRun{}, domain.Errorf(domain.EConflict, "run %s is %s; retry it once it has finished (or cancel it)", runID, old.State)
	}
	if old.Approval == ApprovalRejected && old.SourceDigest == "" {
		return NewRun{}, domain.Errorf(domain.EConflict, "run %s was rejected before it ran, and its snapshot let go: push again (or reopen the pull request) to run it", runID)
	}
	nr, err := copyRun(ctx, tx, old, jobID)
	if err != nil {
		return NewRun{}, err
	}
	if nr.Checks, err = runCheckTarget(ctx, tx, runID); err != nil {
		return NewRun{}, err
	}
	// A retry reads the variables its run read (a firing, the project's
	// now), and is named as its run was (a firing evaluates run-name
	// again).
	nr.Vars = old.Vars
	if nr.Vars == nil {
		nr.Vars = map[string]string{}
	}
	nr.RunName = ""
	if old.RunName != "" {
		nr.RunName = domain.Literal(old.RunName)
	}
	nr.Trigger = fmt.Sprintf("retry of #%d by %s", old.Number, who)
	if jobID != "" {
		j := nr.Jobs[0]
		if len(j.Needs) > 0 {
			// Alone, it would run without the jobs it needs passing first
			// (a deploy without its tests).
			return NewRun{}, domain.Errorf(domain.EInvalid, "job %s needs %v; retry the whole run instead", j.Name, j.Needs)
		}
		nr.Trigger = fmt.Sprintf("retry of #%d %s by %s", old.Number, j.Name, who)
	}
	return nr, nil
}

// copyRun is a NewRun of old's jobs (or only jobID) on its source, in its
// tier and cache scope, with its facts, concurrency group and run-name;
// the caller says its trigger.
func copyRun(ctx context.Context, tx pgx.Tx, old Run, jobID string) (NewRun, error) {
	rows, err := tx.Query(ctx, retryJobsSQL, old.ID, jobID)
	if err != nil {
		return NewRun{}, err
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NewJob, error) {
		var j NewJob
		var spec []byte
		var c domain.Concurrency
		if err := row.Scan(&j.Name, &j.Needs, &j.Labels, &spec, &j.TimeoutSeconds, &j.RetryLeaseLost, &j.RetryFailed,
			&j.Group, &j.If, &j.ContinueOnError, &j.FailFast, &j.MaxParallel, &j.ReadsNeeds, &c.Group, &c.CancelInProgress, &c.CancelExpr); err != nil {
			return j, err
		}
		if c.Group != "" {
			// The template: the new run's needs and facts decide the group.
			j.Concurrency = &c
		}
		var cj domain.ClaimedJob
		if err := json.Unmarshal(spec, &cj); err != nil {
			return j, fmt.Errorf("job %s spec: %w", j.Name, err)
		}
		j.Spec = cj.JobSpec
		// The old run's needs context is not the new run's.
		j.Spec.NeedResults = nil
		return j, nil
	})
	if err != nil {
		return NewRun{}, err
	}
	if len(jobs) == 0 {
		return NewRun{}, domain.Errorf(domain.ENotFound, "job %s of run %s not found", jobID, old.ID)
	}
	var group *domain.Concurrency
	g, ok := strings.CutPrefix(old.ConcurrencyGroup, untrustedGroupPrefix(old.GitRef))
	if !ok {
		// An untrusted group made before groups were per ref.
		g, ok = strings.CutPrefix(g, "untrusted:")
	}
	if ok || g != "" {
		// The group as evaluated (groupOf adds the tier's prefix again).
		group = &domain.Concurrency{Group: domain.Literal(g), CancelInProgress: old.ConcurrencyCancel}
	}
	return NewRun{Project: old.Project, GitSHA: old.GitSHA, GitRef: old.GitRef, GitDirty: old.GitDirty,
		Workflow: old.Workflow, HeadRef: old.HeadRef, Concurrency: group, Inputs: old.Inputs, RunName: old.runNameSpec,
		Source:    domain.Source{BlobDigest: old.SourceDigest, ManifestDigest: old.ManifestDigest, Size: old.SourceSize},
		Untrusted: !old.Trusted, Scope: old.Scope, BaseRef: old.BaseRef, Actor: old.Actor, Jobs: jobs,
		SourceBy: old.SourceBy, SourceToken: old.SourceToken, InputsToken: old.InputsToken}, nil
}
