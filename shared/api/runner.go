package api

import (
	"context"
	"math"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// runnerHandler is a handler for an authenticated runner.
type runnerHandler func(w http.ResponseWriter, r *http.Request, runner store.Runner) error

// asRunner authenticates the bearer token and runs h; any error h returns is
// written by writeError. Authentication says who is calling; whether the
// caller owns a job is decided later, by the store's lease check.
func (s *Server) asRunner(h runnerHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			writeError(w, r, s.Log, domain.Errorf(domain.EUnauthorized, "Authorization: Bearer <runner token> is required"))
			return
		}
		runner, err := s.Store.AuthenticateRunner(r.Context(), strings.TrimSpace(token))
		if err == nil {
			err = h(w, r, runner)
		}
		if err != nil {
			writeError(w, r, s.Log, err)
		}
	}
}

func (s *Server) handle(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, r, s.Log, err)
		}
	}
}

type registerRequest struct {
	RegistrationToken string   `json:"registration_token"`
	Name              string   `json:"name"`
	Labels            []string `json:"labels"`
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) error {
	var req registerRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if req.RegistrationToken == "" {
		return domain.Errorf(domain.EInvalid, "field registration_token is required")
	}
	id, token, err := s.Store.RegisterRunner(r.Context(), req.RegistrationToken, req.Name, req.Labels)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]string{"runner_id": id, "token": token})
	return nil
}

type claimRequest struct {
	Labels      []string `json:"labels"`
	WaitSeconds int      `json:"wait_seconds"`
}

func (s *Server) claim(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req claimRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if req.WaitSeconds < 0 || time.Duration(req.WaitSeconds)*time.Second > store.MaxClaimWait {
		return domain.Errorf(domain.EInvalid, "wait_seconds must be between 0 and %d", int(store.MaxClaimWait.Seconds()))
	}
	c, err := s.Store.Claim(r.Context(), runner, req.Labels, time.Duration(req.WaitSeconds)*time.Second)
	if err != nil {
		return err
	}
	if c == nil {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// leaseRequest is the part every job-scoped request shares.
type leaseRequest struct {
	Lease *domain.Lease `json:"lease"`
}

func (l leaseRequest) lease() (domain.Lease, error) {
	if err := l.Lease.Validate(); err != nil {
		return domain.Lease{}, err
	}
	return *l.Lease, nil
}

// decodeLeased decodes a job-scoped request and returns its validated lease.
func decodeLeased(w http.ResponseWriter, r *http.Request, limit int64, v interface{ lease() (domain.Lease, error) }) (domain.Lease, error) {
	if err := decodeJSON(w, r, limit, v); err != nil {
		return domain.Lease{}, err
	}
	return v.lease()
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req leaseRequest
	l, err := decodeLeased(w, r, maxBody, &req)
	if err != nil {
		return err
	}
	expires, cancel, err := s.Store.Heartbeat(r.Context(), runner.ID, r.PathValue("job_id"), l)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"expires_at": expires.UTC().Format(time.RFC3339Nano), "cancel_requested": cancel})
	return nil
}

type logsRequest struct {
	leaseRequest
	Offset *int64 `json:"offset"`
	Data   []byte `json:"data"` // base64 on the wire
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req logsRequest
	l, err := decodeLeased(w, r, maxLogBody, &req)
	if err != nil {
		return err
	}
	if req.Offset == nil {
		return domain.Errorf(domain.EInvalid, "field offset is required")
	}
	// No log is longer than the limit, so no larger offset can be right
	// (and offset plus length must not overflow).
	if max := s.Store.Limits().MaxLogBytes; *req.Offset < 0 || *req.Offset > max {
		return domain.Errorf(domain.EInvalid, "field offset must be from 0 to %d (the log limit)", max)
	}
	next, err := s.Store.AppendLog(r.Context(), runner.ID, r.PathValue("job_id"), l, *req.Offset, req.Data)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int64{"next_offset": next})
	return nil
}

type completeRequest struct {
	leaseRequest
	Outcome  string `json:"outcome"`
	ExitCode *int   `json:"exit_code"`
	// Reason is an optional extension: why a failed job failed ("timeout").
	Reason string `json:"reason"`
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req completeRequest
	l, err := decodeLeased(w, r, maxBody, &req)
	if err != nil {
		return err
	}
	if req.Outcome == "" {
		return domain.Errorf(domain.EInvalid, "field outcome is required")
	}
	exit := 0
	if req.ExitCode != nil {
		exit = *req.ExitCode
	}
	if exit < math.MinInt32 || exit > math.MaxInt32 {
		return domain.Errorf(domain.EInvalid, "field exit_code must be from %d to %d", math.MinInt32, math.MaxInt32)
	}
	c, err := s.Store.CompleteWithReason(r.Context(), runner.ID, r.PathValue("job_id"), l, req.Outcome, exit, req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"state": c.State, "job_state": c.JobState})
	return nil
}

// sourceRequest, artifactRequest, fetchRequest, restoreRequest and
// cacheRequest are the bodies of the CAS routes.
type artifactRequest struct {
	leaseRequest
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Size   *int64 `json:"size"`
}

type fetchRequest struct {
	leaseRequest
	Job  string `json:"job"`
	Name string `json:"name"`
}

type restoreRequest struct {
	leaseRequest
	Keys []string `json:"keys"`
}

type cacheRequest struct {
	leaseRequest
	Key    string `json:"key"`
	Digest string `json:"digest"`
	Size   *int64 `json:"size"`
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func validBlob(digest string, size *int64) error {
	if !digestRE.MatchString(digest) {
		return domain.Errorf(domain.EInvalid, "field digest must be sha256:<64 lowercase hex digits>")
	}
	if size == nil || *size < 0 || *size > MaxBlobBytes {
		return domain.Errorf(domain.EInvalid, "field size is required, from 0 to %d", int64(MaxBlobBytes))
	}
	return nil
}

func (r *artifactRequest) validate() error {
	if r.Name == "" {
		return domain.Errorf(domain.EInvalid, "field name is required")
	}
	return validBlob(r.Digest, r.Size)
}

func (r *fetchRequest) validate() error {
	if r.Job == "" || r.Name == "" {
		return domain.Errorf(domain.EInvalid, "fields job and name are required")
	}
	return nil
}

func (r *restoreRequest) validate() error {
	if len(r.Keys) == 0 || len(r.Keys) > 16 {
		return domain.Errorf(domain.EInvalid, "field keys must hold 1 to 16 keys")
	}
	for _, k := range r.Keys {
		if k == "" || len(k) > 512 {
			return domain.Errorf(domain.EInvalid, "every cache key must be 1 to 512 characters")
		}
	}
	return nil
}

func (r *cacheRequest) validate() error {
	if r.Key == "" || len(r.Key) > 512 {
		return domain.Errorf(domain.EInvalid, "field key must be 1 to 512 characters")
	}
	return validBlob(r.Digest, r.Size)
}

// leasedBody is a decoded job-scoped body that can check its own fields.
type leasedBody interface {
	lease() (domain.Lease, error)
	validate() error
}

// decodeCAS decodes and validates a CAS route's body.
func decodeCAS(w http.ResponseWriter, r *http.Request, body leasedBody) (domain.Lease, error) {
	l, err := decodeLeased(w, r, maxBody, body)
	if err != nil {
		return l, err
	}
	return l, body.validate()
}

type sourceRequest struct{ leaseRequest }

func (sourceRequest) validate() error { return nil }

// MaxBlobBytes is the largest artifact or cache blob (one S3 PUT).
const MaxBlobBytes = 5 << 30

func (s *Server) source(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req sourceRequest
	l, err := decodeCAS(w, r, &req)
	if err != nil {
		return err
	}
	src, key, err := s.Store.RunSource(r.Context(), runner.ID, r.PathValue("job_id"), l)
	if err != nil {
		return err
	}
	url, err := s.CAS.PresignGet(r.Context(), key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": url, "blob_digest": src.BlobDigest,
		"manifest_digest": src.ManifestDigest, "size": src.Size})
	return nil
}

// uploadAnswer is the answer of artifacts, cache/save and uploads: the
// blob's (project, tier) holds it already, or where to PUT it (after the
// lease or membership check, never before), recorded as an upload so the
// collector removes it if it is never committed.
func (s *Server) uploadAnswer(w http.ResponseWriter, r *http.Request, ref store.BlobRef, size int64) error {
	held, ok, err := s.Store.HeldBlob(r.Context(), ref)
	if err != nil {
		return err
	}
	if ok {
		if held.Size != size {
			return domain.Errorf(domain.EInvalid, "blob %s is %d bytes, not %d", ref.Digest, held.Size, size)
		}
		writeJSON(w, http.StatusOK, map[string]any{"exists": true})
		return nil
	}
	if err := s.Store.StartUpload(r.Context(), ref, size); err != nil {
		return err
	}
	up, err := s.CAS.PresignPut(r.Context(), ref.Key(), ref.Digest, size)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"exists": false, "upload_url": up.URL, "upload_method": up.Method, "upload_headers": up.Headers})
	return nil
}

func (s *Server) artifactUpload(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req artifactRequest
	l, err := decodeCAS(w, r, &req)
	if err != nil {
		return err
	}
	if *req.Size > MaxBlobBytes {
		return domain.Errorf(domain.ETooLarge, "an artifact may be at most %d bytes", int64(MaxBlobBytes))
	}
	job, err := s.Store.CheckLease(r.Context(), runner.ID, r.PathValue("job_id"), l)
	if err != nil {
		return err
	}
	return s.uploadAnswer(w, r, store.BlobRef{ProjectID: job.ProjectID, Trusted: job.Trusted, Digest: req.Digest}, *req.Size)
}

// commitBlob is the shape of artifacts/commit and cache/commit: the store
// checks the lease first (no S3 work for a stale caller), then, for a blob
// the job's (project, tier) does not hold yet, that S3 has it at the
// tier's key with the checksum S3 verified at upload: one HEAD, nothing
// read back, nothing deleted.
func (s *Server) commitBlob(r *http.Request, runner store.Runner, register func(ctx context.Context, runnerID, jobID string) error) error {
	return register(r.Context(), runner.ID, r.PathValue("job_id"))
}

func (s *Server) artifactCommit(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req artifactRequest
	l, err := decodeCAS(w, r, &req)
	if err != nil {
		return err
	}
	err = s.commitBlob(r, runner, func(ctx context.Context, runnerID, jobID string) error {
		return s.Store.CommitArtifact(ctx, runnerID, jobID, l, req.Name, req.Digest, *req.Size)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"name": req.Name, "digest": req.Digest, "size": *req.Size})
	return nil
}

func (s *Server) artifactFetch(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req fetchRequest
	l, err := decodeCAS(w, r, &req)
	if err != nil {
		return err
	}
	b, err := s.Store.FindArtifact(r.Context(), runner.ID, r.PathValue("job_id"), l, req.Job, req.Name)
	if err != nil {
		return err
	}
	url, err := s.CAS.PresignGet(r.Context(), b.Key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": url, "digest": b.Digest, "size": b.Size})
	return nil
}

func (s *Server) cacheRestore(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req restoreRequest
	l, err := decodeCAS(w, r, &req)
	if err != nil {
		return err
	}
	hit, err := s.Store.RestoreCache(r.Context(), runner.ID, r.PathValue("job_id"), l, req.Keys)
	if err != nil {
		return err
	}
	if hit == nil {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	url, err := s.CAS.PresignGet(r.Context(), hit.Blob.Key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": hit.CacheKey, "scope": hit.Scope, "url": url,
		"digest": hit.Blob.Digest, "size": hit.Blob.Size})
	return nil
}

func (s *Server) cacheSave(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req cacheRequest
	l, err := decodeCAS(w, r, &req)
	if err != nil {
		return err
	}
	if *req.Size > MaxBlobBytes {
		return domain.Errorf(domain.ETooLarge, "a cache entry may be at most %d bytes", int64(MaxBlobBytes))
	}
	job, err := s.Store.CheckLease(r.Context(), runner.ID, r.PathValue("job_id"), l)
	if err != nil {
		return err
	}
	exists, err := s.Store.CacheExists(r.Context(), runner.ID, r.PathValue("job_id"), l, req.Key)
	if err != nil {
		return err
	}
	if exists {
		// Entries are immutable; tell the runner not to bother uploading.
		writeJSON(w, http.StatusOK, map[string]any{"exists": true, "key_exists": true})
		return nil
	}
	return s.uploadAnswer(w, r, store.BlobRef{ProjectID: job.ProjectID, Trusted: job.Trusted, Digest: req.Digest}, *req.Size)
}

func (s *Server) cacheCommit(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
	var req cacheRequest
	l, err := decodeCAS(w, r, &req)
	if err != nil {
		return err
	}
	err = s.commitBlob(r, runner, func(ctx context.Context, runnerID, jobID string) error {
		return s.Store.CommitCache(ctx, runnerID, jobID, l, req.Key, req.Digest, *req.Size)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"key": req.Key, "digest": req.Digest, "size": *req.Size})
	return nil
}
