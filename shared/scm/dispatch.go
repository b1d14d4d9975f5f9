package scm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/domain"
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
	sha, resp, err := gh.Repositories.GetCommitSHA1(ctx, owner, name, req.Ref, "")
	if err != nil && resp != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusUnprocessableEntity) {
		return nil, "", "", domain.Errorf(domain.ENotFound, "%s has no %s", repo.FullName, req.Ref)
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("resolve %s: %w", req.Ref, err)
	}
	if !shaRE.MatchString(sha) {
		return nil, "", "", domain.Errorf(domain.EInvalid, "GitHub resolved %s to %q, not a commit", req.Ref, sha)
	}
	src, err := w.snapshotCommit(ctx, gh, owner, name, sha, store.BlobRef{ProjectID: repo.ProjectID, Trusted: req.Trusted})
	if err != nil {
		return nil, "", "", err
	}
	inputs, err := src.Pipeline.Triggers.DispatchInputs(req.Inputs)
	if err != nil {
		return nil, "", "", err
	}
	u := store.User{ID: req.UserID, Name: req.UserName}
	nr := store.NewRun{Project: repo.Project, By: &u, Untrusted: !req.Trusted, Trigger: "dispatch:" + req.UserName,
		GitSHA: sha, GitRef: req.Ref, Source: src.Source, Jobs: src.Pipeline.Jobs, Inputs: inputs,
		Workflow: src.Pipeline.WorkflowName(), Concurrency: src.Pipeline.Concurrency, Schedules: src.Pipeline.Schedules(),
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
