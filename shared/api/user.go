package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/store"
)

// MaxSourceBytes is the largest source snapshot a run may have.
const MaxSourceBytes = 2 << 30

type userHandler func(w http.ResponseWriter, r *http.Request, u store.User) error

// asUser authenticates a user API token. Routes marked adminOnly need a
// global admin; everything else is authorised by the store against the
// project of the thing touched, in the transaction that touches it.
func (s *Server) asUser(adminOnly bool, h userHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var err error
		if !ok {
			err = domain.Errorf(domain.EUnauthorized, "Authorization: Bearer <API token> is required")
		} else {
			var u store.User
			if u, err = s.Store.AuthenticateUser(r.Context(), strings.TrimSpace(token)); err == nil {
				if adminOnly && !u.IsAdmin() {
					err = domain.Errorf(domain.EForbidden, "only global admins may do this")
				} else {
					err = h(w, r, u)
				}
			}
		}
		if err != nil {
			writeError(w, r, s.Log, err)
		}
	}
}

type uploadRequest struct {
	Project string `json:"project"`
	Digest  string `json:"digest"`
	Size    *int64 `json:"size"`
}

// writableProject returns a project u may write to, by name or ID.
func (s *Server) writableProject(ctx context.Context, u store.User, project string) (store.Project, error) {
	if project == "" {
		return store.Project{}, domain.Errorf(domain.EInvalid, "field project is required")
	}
	p, err := s.Store.GetProject(ctx, u, project)
	if err != nil {
		return p, err
	}
	if p.Role == store.RoleRead {
		return p, domain.Errorf(domain.EForbidden, "this needs the write role in %s; you have read", p.Name)
	}
	return p, nil
}

// createUpload hands out a presigned PUT for a source snapshot, into the
// project's namespace of the caller's trust tier.
func (s *Server) createUpload(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req uploadRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if err := protocol.ValidBlob(req.Digest, req.Size); err != nil {
		return err
	}
	if *req.Size > MaxSourceBytes {
		return domain.Errorf(domain.ETooLarge, "a source snapshot may be at most %d bytes", int64(MaxSourceBytes))
	}
	p, err := s.writableProject(r.Context(), u, req.Project)
	if err != nil {
		return err
	}
	up, err := s.Store.PrepareUploadAs(r.Context(), u, p.ID, req.Digest, *req.Size)
	if err != nil {
		return err
	}
	answer, err := s.uploadAnswer(r.Context(), up, *req.Size)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

type createRunRequest struct {
	Project  string        `json:"project"`
	Source   domain.Source `json:"source"`
	GitSHA   string        `json:"git_sha"`
	GitDirty bool          `json:"git_dirty"`
	// Branch is the submitter's checked-out branch: the run's ref
	// (refs/heads/<branch>), which a manual run names to re-run it.
	Branch string `json:"branch"`
	// Trigger and GitRef are the server's to say; a client that sends them
	// is told so rather than silently ignored.
	Trigger *string `json:"trigger"`
	GitRef  *string `json:"git_ref"`
}

// RunView is a run with its jobs.
type RunView struct {
	store.Run
	Jobs []store.JobInfo `json:"jobs"`
}

var gitSHARE = domain.LazyRegexp(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// createRun verifies an uploaded snapshot, reads its pipeline and creates
// the run. Nothing is queued before the blob's digest, size and manifest
// digest are checked and the pipeline file read from the verified bytes.
// The run's trust tier is the caller's: trusted if they hold the project's
// secrets permission.
func (s *Server) createRun(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req createRunRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	switch {
	case req.Trigger != nil:
		return domain.Errorf(domain.EInvalid, "field trigger is set by the server (cli:<user> for a run made here); leave it out")
	case req.GitRef != nil:
		return domain.Errorf(domain.EInvalid, "field git_ref is set by the server (only GitHub states a run's ref); leave it out")
	}
	if err := protocol.ValidBlob(req.Source.BlobDigest, &req.Source.Size); err != nil {
		return err
	}
	if req.Source.Size > MaxSourceBytes {
		return domain.Errorf(domain.EInvalid, "field source.size must be at most %d", int64(MaxSourceBytes))
	}
	if !protocol.ValidDigest(req.Source.ManifestDigest) {
		return domain.Errorf(domain.EInvalid, "field source.manifest_digest must be sha256:<64 lowercase hex digits>")
	}
	if req.GitSHA != "" && !gitSHARE().MatchString(req.GitSHA) {
		return domain.Errorf(domain.EInvalid, "field git_sha must be a full commit SHA")
	}
	ref, err := branchRef(req.Branch)
	if err != nil {
		return err
	}
	p, err := s.writableProject(r.Context(), u, req.Project)
	if err != nil {
		return err
	}
	if _, onGitHub, err := s.Store.ProjectRepository(r.Context(), p.ID); err != nil {
		return err
	} else if onGitHub {
		// Only GitHub states a GitHub project's refs: a submitted branch
		// named main must not pass for a push to main (its schedules,
		// github.ref conditions, concurrency groups).
		ref = ""
	}
	blob := store.BlobRef{ProjectID: p.ID, Trusted: p.Secrets, Digest: req.Source.BlobDigest}
	pl, err := s.verifySource(r.Context(), blob, req.Source)
	if err != nil {
		return err
	}
	run, err := s.Store.CreateRun(r.Context(), store.NewRun{Project: p.Name, By: &u, Untrusted: !p.Secrets,
		GitSHA: req.GitSHA, GitRef: ref, GitDirty: req.GitDirty, Source: req.Source, Jobs: pl.Jobs,
		Workflow: pl.WorkflowName(), Concurrency: pl.Concurrency, RunName: pl.RunName, Schedules: pl.Schedules(), SourceBy: "user:" + u.ID,
		SourceToken: u.TokenID})
	if err != nil {
		return err
	}
	return s.writeRun(w, r, u, run.ID, http.StatusCreated)
}

// verifySource reads the uploaded blob once, hashing it while Inspect
// checks every entry and recomputes the manifest, and returns the pipeline
// parsed from the verified bytes.
func (s *Server) verifySource(ctx context.Context, ref store.BlobRef, src domain.Source) (*pipeline.Pipeline, error) {
	key := ref.Key()
	if held, ok, err := s.Store.HeldBlob(ctx, ref); err != nil {
		return nil, err
	} else if ok {
		key = held.Key
	}
	body, n, err := s.CAS.Open(ctx, key)
	if errors.Is(err, cas.ErrNotFound) {
		return nil, domain.Errorf(domain.EInvalid, "source blob %s has not been uploaded", src.BlobDigest)
	}
	if err != nil {
		return nil, err
	}
	defer body.Close()
	if n != src.Size {
		return nil, domain.Errorf(domain.EInvalid, "uploaded source is %d bytes, not %d", n, src.Size)
	}
	h := sha256.New()
	tee := io.TeeReader(io.LimitReader(body, src.Size+1), h)
	m, files, err := snapshot.Inspect(tee, snapshot.Limits{}, []string{pipeline.FileName}, pipeline.MaxFileBytes)
	if err != nil {
		if errors.Is(err, snapshot.ErrRefused) {
			return nil, domain.Errorf(domain.EInvalid, "source snapshot is refused: %v", err)
		}
		return nil, err
	}
	if _, err := io.Copy(h, tee); err != nil {
		return nil, err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != src.BlobDigest {
		return nil, domain.Errorf(domain.EInvalid, "uploaded source hashes to %s, not %s", got, src.BlobDigest)
	}
	if got := m.Digest(); got != src.ManifestDigest {
		return nil, domain.Errorf(domain.EInvalid, "source snapshot has manifest %s, not %s", got, src.ManifestDigest)
	}
	content, ok := files[pipeline.FileName]
	if !ok {
		return nil, domain.Errorf(domain.EInvalid, "the snapshot has no %s at its root (or it is over %d bytes)", pipeline.FileName, pipeline.MaxFileBytes)
	}
	pl, err := pipeline.Parse(pipeline.FileName, content)
	if err != nil {
		return nil, pipeline.AsError(err)
	}
	return pl, nil
}

func (s *Server) runView(ctx context.Context, u store.User, runID string) (RunView, error) {
	run, err := s.Store.GetRunAs(ctx, u, runID)
	if err != nil {
		return RunView{}, err
	}
	jobs, err := s.Store.RunJobs(ctx, runID)
	if err != nil {
		return RunView{}, err
	}
	return RunView{Run: run, Jobs: jobs}, nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, u store.User) error {
	return s.writeRun(w, r, u, r.PathValue("run_id"), http.StatusOK)
}

// getLog returns the log from the stored offset ?offset= (default 0) of
// the current or ?generation= attempt, masked (store.ReadLogAs): the body
// is text, X-Next-Offset the stored offset to continue from.
func (s *Server) getLog(w http.ResponseWriter, r *http.Request, u store.User) error {
	q := r.URL.Query()
	offset, err := queryInt(q.Get("offset"), 0)
	if err != nil || offset < 0 || offset > s.Store.Limits().MaxLogBytes {
		return domain.Errorf(domain.EInvalid, "offset must be an integer from 0 to %d (the log limit)", s.Store.Limits().MaxLogBytes)
	}
	gen, err := generationOf(q)
	if err != nil {
		return err
	}
	lw, err := s.Store.ReadLogAs(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"), gen, offset, 1<<20)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Next-Offset", strconv.FormatInt(lw.NextOffset, 10))
	w.Header().Set("X-Generation", strconv.Itoa(lw.Generation))
	_, _ = w.Write(lw.Data)
	return nil
}

func queryInt(s string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not an integer: %q", s)
	}
	return v, nil
}

// cancel cancels a run or one of its jobs.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, u store.User) error {
	canceled, asked, err := s.Store.Cancel(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]int{"canceled": canceled, "cancel_requested": asked})
	return nil
}
