package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/store"
)

// MaxSourceBytes is the largest source snapshot a run may have.
const MaxSourceBytes = 2 << 30

type userHandler func(w http.ResponseWriter, r *http.Request, u store.User) error

// asUser authenticates a user API token and requires at least role.
func (s *Server) asUser(role string, h userHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var err error
		if !ok {
			err = domain.Errorf(domain.EUnauthorized, "Authorization: Bearer <API token> is required")
		} else {
			var u store.User
			if u, err = s.Store.AuthenticateUser(r.Context(), strings.TrimSpace(token)); err == nil {
				if !u.Can(role) {
					err = domain.Errorf(domain.EForbidden, "this needs the %s role; you have %s", role, u.Role)
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
	Digest string `json:"digest"`
	Size   *int64 `json:"size"`
}

// createUpload hands out a presigned PUT for a source snapshot.
func (s *Server) createUpload(w http.ResponseWriter, r *http.Request, _ store.User) error {
	var req uploadRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if err := validBlob(req.Digest, req.Size); err != nil {
		return err
	}
	if *req.Size > MaxSourceBytes {
		return domain.Errorf(domain.ETooLarge, "a source snapshot may be at most %d bytes", int64(MaxSourceBytes))
	}
	_, known, err := s.Store.BlobKnown(r.Context(), req.Digest)
	if err != nil {
		return err
	}
	return s.uploadAnswer(w, r, req.Digest, *req.Size, known)
}

type createRunRequest struct {
	Project  string        `json:"project"`
	Source   domain.Source `json:"source"`
	GitSHA   string        `json:"git_sha"`
	GitRef   string        `json:"git_ref"`
	GitDirty bool          `json:"git_dirty"`
	Trigger  string        `json:"trigger"`
}

var projectRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)

// RunView is a run with its jobs.
type RunView struct {
	store.Run
	Jobs []store.JobInfo `json:"jobs"`
}

// createRun verifies an uploaded snapshot, reads its pipeline and creates
// the run. Nothing is queued before the blob's digest, size and manifest
// digest are checked and the pipeline file read from the verified bytes.
func (s *Server) createRun(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req createRunRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if !projectRE.MatchString(req.Project) {
		return domain.Errorf(domain.EInvalid, "field project must be 1 to 200 letters, digits or . _ / -, starting with a letter or digit")
	}
	if err := validBlob(req.Source.BlobDigest, &req.Source.Size); err != nil {
		return err
	}
	if !digestRE.MatchString(req.Source.ManifestDigest) {
		return domain.Errorf(domain.EInvalid, "field source.manifest_digest must be sha256:<64 lowercase hex digits>")
	}
	if req.GitSHA != "" && !regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`).MatchString(req.GitSHA) {
		return domain.Errorf(domain.EInvalid, "field git_sha must be a full commit SHA")
	}
	if len(req.GitRef) > 250 {
		return domain.Errorf(domain.EInvalid, "field git_ref is too long")
	}
	if req.Trigger == "" {
		req.Trigger = "cli:" + u.Name
	}
	pl, err := s.verifySource(r.Context(), req.Source)
	if err != nil {
		return err
	}
	if err := s.Store.RegisterBlob(r.Context(), req.Source.BlobDigest, req.Source.Size); err != nil {
		return err
	}
	nr := store.NewRun{Project: req.Project, Trigger: req.Trigger, GitSHA: req.GitSHA, GitRef: req.GitRef,
		GitDirty: req.GitDirty, Source: req.Source, Jobs: store.JobsOf(pl)}
	run, err := s.Store.CreateRun(r.Context(), nr)
	if err != nil {
		return err
	}
	view, err := s.runView(r.Context(), run.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, view)
	return nil
}

// verifySource reads the uploaded blob once, hashing it while Inspect
// checks every entry and recomputes the manifest, and returns the pipeline
// parsed from the verified bytes.
func (s *Server) verifySource(ctx context.Context, src domain.Source) (*pipeline.Pipeline, error) {
	body, n, err := s.CAS.Open(ctx, src.BlobDigest)
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
		return nil, domain.Errorf(domain.EInvalid, "%s is not valid:\n%v", pipeline.FileName, err)
	}
	return pl, nil
}

func (s *Server) runView(ctx context.Context, runID string) (RunView, error) {
	run, err := s.Store.GetRun(ctx, runID)
	if err != nil {
		return RunView{}, err
	}
	jobs, err := s.Store.RunJobs(ctx, runID)
	if err != nil {
		return RunView{}, err
	}
	return RunView{Run: run, Jobs: jobs}, nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, _ store.User) error {
	view, err := s.runView(r.Context(), r.PathValue("run_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

// getLog returns raw log bytes from ?offset= (default 0) of the current or
// ?generation= attempt; X-Next-Offset says where to continue.
func (s *Server) getLog(w http.ResponseWriter, r *http.Request, _ store.User) error {
	q := r.URL.Query()
	offset, err := queryInt(q.Get("offset"), 0)
	if err != nil || offset < 0 {
		return domain.Errorf(domain.EInvalid, "offset must be a non-negative integer")
	}
	gen, err := queryInt(q.Get("generation"), 0)
	if err != nil || gen < 0 {
		return domain.Errorf(domain.EInvalid, "generation must be a non-negative integer")
	}
	data, g, err := s.Store.ReadLog(r.Context(), r.PathValue("run_id"), r.PathValue("job_id"), int(gen), offset, 1<<20)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Next-Offset", strconv.FormatInt(offset+int64(len(data)), 10))
	w.Header().Set("X-Generation", strconv.Itoa(g))
	_, _ = w.Write(data)
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
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, _ store.User) error {
	canceled, asked, err := s.Store.Cancel(r.Context(), r.PathValue("run_id"), r.PathValue("job_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]int{"canceled": canceled, "cancel_requested": asked})
	return nil
}
