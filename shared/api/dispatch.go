package api

import (
	"net/http"
	"regexp"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
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

// dispatch makes a manual run (workflow_dispatch): the newest snapshot
// submitted for the ref, run again with the inputs its pipeline declares,
// in the caller's tier, triggered as dispatch:<user>.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req dispatchRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	ref := req.Ref
	if !strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
		var err error
		if ref, err = branchRef(req.Ref); err != nil || ref == "" {
			return domain.Errorf(domain.EInvalid, "field ref must be a branch (main) or a full ref (refs/heads/main, refs/tags/v1)")
		}
	}
	p, err := s.writableProject(r.Context(), u, r.PathValue("project"))
	if err != nil {
		return err
	}
	old, err := s.Store.LatestSnapshot(r.Context(), p.ID, ref, p.Secrets)
	if err != nil {
		return err
	}
	src := domain.Source{BlobDigest: old.SourceDigest, ManifestDigest: old.ManifestDigest, Size: old.SourceSize}
	pl, err := s.verifySource(r.Context(), store.BlobRef{ProjectID: p.ID, Trusted: p.Secrets, Digest: src.BlobDigest}, src)
	if err != nil {
		return err
	}
	inputs, err := pl.Triggers.DispatchInputs(req.Inputs)
	if err != nil {
		return err
	}
	run, err := s.Store.CreateRun(r.Context(), store.NewRun{Project: p.Name, By: &u, Untrusted: !p.Secrets,
		Trigger: "dispatch:" + u.Name, GitSHA: old.GitSHA, GitDirty: old.GitDirty, GitRef: ref, Source: src, Jobs: pl.Jobs,
		Workflow: pl.WorkflowName(), Concurrency: pl.Concurrency, Inputs: inputs})
	if err != nil {
		return err
	}
	return s.writeRun(w, r, u, run.ID, http.StatusCreated)
}
