package scm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// dispatch makes the manual run a user asked for of a GitHub project's
// ref (store.EventDispatch): the ref resolved through GitHub as the App
// now, its commit snapshotted, the inputs checked against that commit's
// pipeline, and the run made as the user, whose write role (and secrets
// permission, for a trusted run) the store checks again in the run's
// transaction. Every refusal is permanent and says why; nothing is made.
func (w *Worker) dispatch(ctx context.Context, gh *github.Client, d *store.Delivery, repo store.Repository,
	owner, name string) (*store.Run, string, string, error) {
	var req store.DispatchRequest
	if err := json.Unmarshal(d.Payload, &req); err != nil || req.UserID == "" || req.Ref == "" {
		return nil, "", "", domain.Errorf(domain.EInvalid, "the dispatch payload does not parse")
	}
	sha, err := w.resolve(ctx, gh, repo, owner, name, req.Ref)
	if err != nil {
		return nil, "", "", err
	}
	src, err := w.snapshotCommit(ctx, gh, owner, name, sha, store.BlobRef{ProjectID: repo.ProjectID, Trusted: req.Trusted})
	if err != nil {
		return nil, "", "", err
	}
	inputs, err := src.Pipeline.Triggers.DispatchInputs(req.Inputs)
	if err != nil {
		return nil, "", "", err
	}
	u := store.User{ID: req.UserID, Name: req.UserName, TokenID: req.TokenID}
	nr := store.NewRun{Project: repo.Project, By: &u, Untrusted: !req.Trusted, Trigger: "dispatch:" + req.UserName,
		GitSHA: sha, GitRef: req.Ref, Source: src.Source, Jobs: src.Pipeline.Jobs, Inputs: inputs,
		Workflow: src.Pipeline.WorkflowName(), Concurrency: src.Pipeline.Concurrency, RunName: src.Pipeline.RunName, Schedules: src.Pipeline.Schedules(),
		Checks: &store.CheckTarget{RepositoryID: repo.GitHubID, HeadSHA: sha}}
	if req.Trusted {
		nr.Scope = req.Ref // the branch's caches, as its pushes'
	}
	created, err := w.Store.CompleteDeliveryWithRun(ctx, d, nr)
	if err != nil {
		return nil, "", "", err
	}
	return &created, "", sha, nil
}

// followSchedules makes the schedules of a push to the repository's
// default branch the project's (whether or not the push makes a run), as
// GitHub reads the default branch's workflow file for its schedules.
//
// Pushes are processed in any order (retries, workers side by side): the
// pushed commit sets the schedules only while it is still the branch's
// head, as the App sees it now; a firing repairs what a race leaves
// (scheduled).
func (w *Worker) followSchedules(ctx context.Context, gh *github.Client, owner, name string, ev any, repo store.Repository,
	pl *pipeline.Pipeline) error {
	e, ok := ev.(*github.PushEvent)
	if !ok || e.GetRepo().GetDefaultBranch() == "" || e.GetRef() != "refs/heads/"+e.GetRepo().GetDefaultBranch() {
		return nil
	}
	if head, err := w.resolve(ctx, gh, repo, owner, name, e.GetRef()); err != nil || head != e.GetAfter() {
		return nil
	}
	return w.Store.SetRepoSchedules(ctx, repo.ProjectID, repo.GitHubID, e.GetRef(), pl.Schedules())
}

// scheduled makes the run of a GitHub project's schedule firing
// (store.EventSchedule): on the repository's default branch as GitHub
// names it now (renamed since the schedule was set, it is followed),
// resolved through GitHub as the App, as GitHub runs a schedule on the
// default branch's latest commit; a trusted run of the repository's own
// ref.
func (w *Worker) scheduled(ctx context.Context, gh *github.Client, d *store.Delivery, repo store.Repository,
	owner, name string) (*store.Run, string, string, error) {
	var req store.ScheduleRequest
	if err := json.Unmarshal(d.Payload, &req); err != nil || req.Ref == "" || req.Cron == "" {
		return nil, "", "", domain.Errorf(domain.EInvalid, "the schedule payload does not parse")
	}
	ref, err := w.defaultBranch(ctx, gh, repo, owner, name)
	if err != nil {
		return nil, "", "", err
	}
	sha, err := w.resolve(ctx, gh, repo, owner, name, ref)
	if err != nil {
		return nil, "", "", err
	}
	src, err := w.snapshotCommit(ctx, gh, owner, name, sha, store.BlobRef{ProjectID: repo.ProjectID, Trusted: true})
	if domain.ErrorCode(err) == domain.EInvalid {
		// The branch has no valid pipeline now: it schedules nothing.
		_ = w.Store.SetRepoSchedules(ctx, repo.ProjectID, repo.GitHubID, ref, nil)
	}
	if err != nil {
		return nil, "", "", err
	}
	has := slices.ContainsFunc(src.Pipeline.Schedules(), func(s domain.Schedule) bool { return s.Cron == req.Cron })
	if !has || ref != req.Ref {
		// The branch's pipeline dropped this schedule since it was set
		// (a push processed out of order), or the default branch is
		// another now: the schedules follow its head.
		if err := w.Store.SetRepoSchedules(ctx, repo.ProjectID, repo.GitHubID, ref, src.Pipeline.Schedules()); err != nil {
			return nil, "", "", err
		}
	}
	if !has {
		return nil, "the pipeline of " + ref + " at " + sha[:12] + " has no schedule " + req.Cron + " any more", sha, nil
	}
	req.Ref = ref
	nr := store.NewRun{Project: repo.Project, Trigger: "schedule: " + req.Cron, Actor: "github:schedule",
		GitSHA: sha, GitRef: req.Ref, Scope: req.Ref, Source: src.Source, Jobs: src.Pipeline.Jobs,
		Workflow: src.Pipeline.WorkflowName(), Concurrency: src.Pipeline.Concurrency, RunName: src.Pipeline.RunName,
		Checks: &store.CheckTarget{RepositoryID: repo.GitHubID, HeadSHA: sha}}
	created, err := w.Store.CompleteDeliveryWithRun(ctx, d, nr)
	if err != nil {
		return nil, "", "", err
	}
	// For the project page; the run stands whatever happens here.
	_ = w.Store.SetFiringRun(ctx, repo.ProjectID, req, created.ID)
	return &created, "", sha, nil
}

// defaultBranch is the repository's default branch as GitHub names it
// now, as a ref.
func (w *Worker) defaultBranch(ctx context.Context, gh *github.Client, repo store.Repository, owner, name string) (string, error) {
	r, resp, err := gh.Repositories.Get(ctx, owner, name)
	if err != nil && resp != nil && resp.StatusCode == http.StatusNotFound {
		return "", domain.Errorf(domain.ENotFound, "%s is not on GitHub any more", repo.FullName)
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", repo.FullName, err)
	}
	b := r.GetDefaultBranch()
	if !domain.ValidBranch(b) {
		return "", domain.Errorf(domain.EInvalid, "GitHub names %q the default branch of %s", b, repo.FullName)
	}
	return "refs/heads/" + b, nil
}

// resolve is the commit ref names in the repository now, as the App sees
// it.
func (w *Worker) resolve(ctx context.Context, gh *github.Client, repo store.Repository, owner, name, ref string) (string, error) {
	sha, resp, err := gh.Repositories.GetCommitSHA1(ctx, owner, name, ref, "")
	if err != nil && resp != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusUnprocessableEntity) {
		return "", domain.Errorf(domain.ENotFound, "%s has no %s", repo.FullName, ref)
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", ref, err)
	}
	if !shaRE().MatchString(sha) {
		return "", domain.Errorf(domain.EInvalid, "GitHub resolved %s to %q, not a commit", ref, sha)
	}
	return sha, nil
}
