package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// branchRef is refs/heads/<branch>, or "" for no branch.
func branchRef(branch string) (string, error) {
	if branch == "" {
		return "", nil
	}
	if !domain.ValidBranch(branch) {
		return "", domain.Errorf(domain.EInvalid, "field branch %q is not a branch name", branch)
	}
	return "refs/heads/" + branch, nil
}

// dispatchRequest asks for a manual run of a project's ref.
type dispatchRequest struct {
	Ref    string            `json:"ref"`
	Inputs map[string]string `json:"inputs"`
}

// dispatch makes a manual run (workflow_dispatch): see Dispatch. A
// GitHub project's is 202 with the delivery that will make it.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req dispatchRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	d, err := s.Dispatch(r.Context(), u, r.PathValue("project"), req.Ref, req.Inputs)
	if err != nil {
		return err
	}
	if d.Delivery != "" {
		writeJSON(w, http.StatusAccepted, map[string]string{"delivery": d.Delivery,
			"note": "the run is made when the GitHub worker has fetched the ref's commit (forgeci deliveries)"})
		return nil
	}
	return s.writeRun(w, r, u, d.Run.ID, http.StatusCreated)
}

// fullRef is ref as a full ref: a branch name is refs/heads/<name>.
func fullRef(ref string) (string, error) {
	for _, prefix := range []string{"refs/heads/", "refs/tags/"} {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			if _, err := branchRef(name); err != nil {
				return "", domain.Errorf(domain.EInvalid, "field ref %q is not a ref", ref)
			}
			return ref, nil
		}
	}
	full, err := branchRef(ref)
	if err != nil || full == "" {
		return "", domain.Errorf(domain.EInvalid, "field ref must be a branch (main) or a full ref (refs/heads/main, refs/tags/v1)")
	}
	return full, nil
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

// manualRun finds and verifies the newest snapshot of ref in the user's
// tier.
func (s *Server) manualRun(ctx context.Context, u store.User, p store.Project, ref string) (*manual, error) {
	old, err := s.Store.LatestSnapshot(ctx, p.ID, ref, p.Secrets, "user:"+u.ID)
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
// (the on.workflow_dispatch of its newest snapshot ForgeCI has), for a
// form to ask for; an error when it cannot be run by hand.
func (s *Server) DispatchInputs(ctx context.Context, u store.User, project, ref string) ([]pipeline.Input, error) {
	ref, err := fullRef(ref)
	if err != nil {
		return nil, err
	}
	p, err := s.writableProject(ctx, u, project)
	if err != nil {
		return nil, err
	}
	m, err := s.manualRun(ctx, u, p, ref)
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

// Dispatched is a manual run made (Run), or, for a GitHub project, the
// delivery that will make it once the worker has resolved the ref through
// GitHub (Delivery).
type Dispatched struct {
	Run      store.Run
	Delivery string
}

// Dispatch makes a manual run (workflow_dispatch) of the project's ref,
// with the inputs its pipeline declares (checked and typed), in the
// caller's tier, triggered as dispatch:<user>. A project fed by forgeci
// submit runs its newest snapshot of the ref again; a GitHub project's
// ref is resolved through GitHub by the worker, which checks the inputs
// and the caller's permission again when it makes the run.
func (s *Server) Dispatch(ctx context.Context, u store.User, project, ref string, given map[string]string) (Dispatched, error) {
	ref, err := fullRef(ref)
	if err != nil {
		return Dispatched{}, err
	}
	if err := checkInputs(given); err != nil {
		return Dispatched{}, err
	}
	p, err := s.writableProject(ctx, u, project)
	if err != nil {
		return Dispatched{}, err
	}
	if repo, onGitHub, err := s.Store.ProjectRepository(ctx, p.ID); err != nil || onGitHub {
		if err != nil {
			return Dispatched{}, err
		}
		guid, err := s.Store.RecordDispatch(ctx, repo, store.DispatchRequest{Ref: ref, Inputs: given,
			UserID: u.ID, UserName: u.Name, Trusted: p.Secrets, TokenID: u.TokenID})
		if err == nil && s.OnDelivery != nil {
			_ = s.OnDelivery(ctx) // sooner than the note, as for a webhook delivery
		}
		return Dispatched{Delivery: guid}, err
	}
	m, err := s.manualRun(ctx, u, p, ref)
	if err != nil {
		return Dispatched{}, err
	}
	inputs, err := m.pl.Triggers.DispatchInputs(given)
	if err != nil {
		return Dispatched{}, err
	}
	run, err := s.Store.CreateRun(ctx, store.NewRun{Project: m.project.Name, By: &u, Untrusted: !m.project.Secrets,
		Trigger: "dispatch:" + u.Name, GitSHA: m.old.GitSHA, GitDirty: m.old.GitDirty, GitRef: m.ref, Source: m.source,
		Jobs: m.pl.Jobs, Workflow: m.pl.WorkflowName(), Concurrency: m.pl.Concurrency, RunName: m.pl.RunName, Inputs: inputs, Schedules: m.pl.Schedules(),
		SourceBy: m.old.SourceBy, SourceToken: m.old.SourceToken})
	return Dispatched{Run: run}, err
}

// Limits of a manual run's inputs as given (the pipeline's own limits
// come after: at most 25 declared).
const (
	maxGivenInputs     = 25
	maxInputValueBytes = 4 << 10
)

// checkInputs bounds what a caller gives before anything is read.
func checkInputs(given map[string]string) error {
	if len(given) > maxGivenInputs {
		return domain.Errorf(domain.EInvalid, "field inputs holds %d names, over the limit of %d", len(given), maxGivenInputs)
	}
	for k, v := range given {
		if len(k) > 100 || len(v) > maxInputValueBytes || strings.ContainsRune(k+v, 0) {
			return domain.Errorf(domain.EInvalid, "input %.100q: names are at most 100 bytes, values %d, and neither holds NUL", k, maxInputValueBytes)
		}
	}
	return nil
}
