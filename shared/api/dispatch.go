package api

import (
	"context"
	"net/http"
	"regexp"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// branchRE is a branch name as ForgeCI takes one (git's rules, simply:
// no .., //, trailing / or ., or .lock).
var branchRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}$`)

// branchRef is refs/heads/<branch>, or "" for no branch.
func branchRef(branch string) (string, error) {
	if branch == "" {
		return "", nil
	}
	if !branchRE.MatchString(branch) || strings.Contains(branch, "..") || strings.Contains(branch, "//") ||
		strings.HasSuffix(branch, "/") || strings.HasSuffix(branch, ".") || strings.HasSuffix(branch, ".lock") {
		return "", domain.Errorf(domain.EInvalid, "field branch %q is not a branch name", branch)
	}
	return "refs/heads/" + branch, nil
}

// dispatchRequest asks for a manual run of a project's ref.
type dispatchRequest struct {
	Ref    string            `json:"ref"`
	Inputs map[string]string `json:"inputs"`
}

// dispatch makes a manual run (workflow_dispatch): see Dispatch.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req dispatchRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	run, err := s.Dispatch(r.Context(), u, r.PathValue("project"), req.Ref, req.Inputs)
	if err != nil {
		return err
	}
	return s.writeRun(w, r, u, run.ID, http.StatusCreated)
}

// manual is what a manual run of a project's ref starts from: the newest
// snapshot submitted for it in the user's tier, and its pipeline.
type manual struct {
	project store.Project
	ref     string
	old     store.Run
	source  domain.Source
	pl      *pipeline.Pipeline
}

// manualRun finds and verifies what a manual run of ref would run.
func (s *Server) manualRun(ctx context.Context, u store.User, project, ref string) (*manual, error) {
	if !strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
		full, err := branchRef(ref)
		if err != nil || full == "" {
			return nil, domain.Errorf(domain.EInvalid, "field ref must be a branch (main) or a full ref (refs/heads/main, refs/tags/v1)")
		}
		ref = full
	}
	p, err := s.writableProject(ctx, u, project)
	if err != nil {
		return nil, err
	}
	old, err := s.Store.LatestSnapshot(ctx, p.ID, ref, p.Secrets)
	if err != nil {
		return nil, err
	}
	src := domain.Source{BlobDigest: old.SourceDigest, ManifestDigest: old.ManifestDigest, Size: old.SourceSize}
	pl, err := s.verifySource(ctx, store.BlobRef{ProjectID: p.ID, Trusted: p.Secrets, Digest: src.BlobDigest}, src)
	if err != nil {
		return nil, err
	}
	return &manual{project: p, ref: ref, old: old, source: src, pl: pl}, nil
}

// DispatchInputs are the inputs a manual run of the project's ref takes
// (its newest snapshot's on.workflow_dispatch), for a form to ask for;
// an error when it cannot be run by hand.
func (s *Server) DispatchInputs(ctx context.Context, u store.User, project, ref string) ([]pipeline.Input, error) {
	m, err := s.manualRun(ctx, u, project, ref)
	if err != nil {
		return nil, err
	}
	if t := m.pl.Triggers; t != nil {
		if t.Dispatch == nil {
			return nil, domain.Errorf(domain.EInvalid, "the pipeline's on: has no workflow_dispatch: it is not run by hand")
		}
		return t.Dispatch.Inputs, nil
	}
	return nil, nil
}

// Dispatch makes a manual run (workflow_dispatch): the newest snapshot
// submitted for the ref, run again with the inputs its pipeline declares
// (checked and typed), in the caller's tier, triggered as dispatch:<user>.
func (s *Server) Dispatch(ctx context.Context, u store.User, project, ref string, given map[string]string) (store.Run, error) {
	m, err := s.manualRun(ctx, u, project, ref)
	if err != nil {
		return store.Run{}, err
	}
	inputs, err := m.pl.Triggers.DispatchInputs(given)
	if err != nil {
		return store.Run{}, err
	}
	return s.Store.CreateRun(ctx, store.NewRun{Project: m.project.Name, By: &u, Untrusted: !m.project.Secrets,
		Trigger: "dispatch:" + u.Name, GitSHA: m.old.GitSHA, GitDirty: m.old.GitDirty, GitRef: m.ref, Source: m.source,
		Jobs: m.pl.Jobs, Workflow: m.pl.WorkflowName(), Concurrency: m.pl.Concurrency, Inputs: inputs, Schedules: m.pl.Schedules()})
}
