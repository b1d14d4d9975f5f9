package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// asRunner authenticates the bearer token and runs h; any error h returns is
// written by writeError. Authentication says who is calling; whether the
// caller owns a job is decided later, by the store's lease check.
func (s *Server) asRunner(h func(w http.ResponseWriter, r *http.Request, runner store.Runner) error) http.HandlerFunc {
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

// held is the lease a runner presents on one request: who it is (the
// authenticated runner), the job its path names, and the tuple its body
// carries. It proves nothing yet: only the store's writing statement or
// transaction decides whether it is current.
type held struct {
	Runner store.Runner
	JobID  string
	Lease  domain.Lease
}

// leasedRoute adapts the handler of a job-scoped route: it authenticates
// the runner, decodes at most limit bytes into the route's request type,
// validates the request and its lease tuple, and writes the answer the
// handler returns with status (204 when it returns none).
func leasedRoute[Req, Resp any, P interface {
	*Req
	protocol.LeasedRequest
}](limit int64, status int, h func(s *Server, ctx context.Context, l held, req P) (*Resp, error)) func(*Server) http.HandlerFunc {
	return func(s *Server) http.HandlerFunc {
		return s.asRunner(func(w http.ResponseWriter, r *http.Request, runner store.Runner) error {
			req := P(new(Req))
			if err := decodeJSON(w, r, limit, req); err != nil {
				return err
			}
			l, err := req.LeaseTuple()
			if err != nil {
				return err
			}
			if err := req.Validate(); err != nil {
				return err
			}
			answer, err := h(s, r.Context(), held{Runner: runner, JobID: r.PathValue("job_id"), Lease: l}, req)
			if err != nil {
				return err
			}
			if answer == nil {
				w.WriteHeader(http.StatusNoContent)
				return nil
			}
			writeJSON(w, status, answer)
			return nil
		})
	}
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) error {
	var req protocol.RegisterRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	id, token, err := s.Store.RegisterRunner(r.Context(), req.RegistrationToken, req.Name, req.Labels)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, protocol.RegisterResponse{RunnerID: id, Token: token})
	return nil
}

// claim is a claim without wake-up hints: a long poll of PostgreSQL.
func (s *Server) claim(w http.ResponseWriter, r *http.Request, runner store.Runner, req protocol.ClaimRequest) error {
	runner.Features, runner.Version, runner.Slots = req.Features, req.Version, req.Slots
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

func (s *Server) heartbeat(ctx context.Context, l held, _ *protocol.HeartbeatRequest) (*protocol.HeartbeatResponse, error) {
	expires, cancel, err := s.Store.Heartbeat(ctx, l.Runner.ID, l.JobID, l.Lease)
	if err != nil {
		return nil, err
	}
	return &protocol.HeartbeatResponse{ExpiresAt: expires.UTC(), CancelRequested: cancel}, nil
}

func (s *Server) logs(ctx context.Context, l held, req *protocol.LogsRequest) (*protocol.LogsResponse, error) {
	// No log is longer than the limit, so no larger offset can be right
	// (and offset plus length must not overflow).
	if max := s.Store.Limits().MaxLogBytes; *req.Offset > max {
		return nil, domain.Errorf(domain.EInvalid, "field offset must be from 0 to %d (the log limit)", max)
	}
	next, err := s.Store.AppendLogWith(ctx, l.Runner.ID, l.JobID, l.Lease,
		store.LogAppend{Offset: *req.Offset, Data: req.Data, Times: req.Times, Steps: req.Steps})
	if err != nil {
		return nil, err
	}
	return &protocol.LogsResponse{NextOffset: next}, nil
}

func (s *Server) outputs(ctx context.Context, l held, req *protocol.OutputsRequest) (*protocol.OutputsResponse, error) {
	if err := s.Store.SetOutputs(ctx, l.Runner.ID, l.JobID, l.Lease, req.Outputs); err != nil {
		return nil, err
	}
	return &protocol.OutputsResponse{}, nil
}

func (s *Server) complete(ctx context.Context, l held, req *protocol.CompleteRequest) (*protocol.CompleteResponse, error) {
	c, err := s.Store.CompleteWithReason(ctx, l.Runner.ID, l.JobID, l.Lease, req.Outcome, req.Exit(), req.Reason)
	if err != nil {
		return nil, err
	}
	return &protocol.CompleteResponse{State: c.State, JobState: c.JobState}, nil
}

func (s *Server) source(ctx context.Context, l held, _ *protocol.SourceRequest) (*protocol.SourceResponse, error) {
	src, key, err := s.Store.RunSource(ctx, l.Runner.ID, l.JobID, l.Lease)
	if err != nil {
		return nil, err
	}
	url, err := s.CAS.PresignGet(ctx, key)
	if err != nil {
		return nil, err
	}
	return &protocol.SourceResponse{URL: url, Source: src}, nil
}

// uploadAnswer is the answer of artifacts, cache/save and uploads: the
// blob's (project, tier) holds it already, or where to PUT it. The store
// recorded the upload in the transaction of the lease or membership check;
// the URL is signed only after that committed.
func (s *Server) uploadAnswer(ctx context.Context, up store.Upload, size int64) (*protocol.UploadResponse, error) {
	if up.Held {
		return &protocol.UploadResponse{Exists: true, KeyExists: up.KeyExists}, nil
	}
	put, err := s.CAS.PresignPut(ctx, up.Ref.Key(), up.Ref.Digest, size)
	if err != nil {
		return nil, err
	}
	return &protocol.UploadResponse{URL: put.URL, Method: put.Method, Headers: put.Headers}, nil
}

func (s *Server) artifactUpload(ctx context.Context, l held, req *protocol.ArtifactRequest) (*protocol.UploadResponse, error) {
	up, err := s.Store.PrepareArtifactUpload(ctx, l.Runner.ID, l.JobID, l.Lease, req.Digest, *req.Size)
	if err != nil {
		return nil, err
	}
	return s.uploadAnswer(ctx, up, *req.Size)
}

// artifactCommit and cacheCommit: the store checks the lease first (no S3
// work for a stale caller), then, for a blob the job's (project, tier) does
// not hold yet, that S3 has it at the tier's key with the checksum S3
// verified at upload: one HEAD, nothing read back, nothing deleted.
func (s *Server) artifactCommit(ctx context.Context, l held, req *protocol.ArtifactRequest) (*protocol.ArtifactCommitResponse, error) {
	if err := s.Store.CommitArtifact(ctx, l.Runner.ID, l.JobID, l.Lease, req.Name, req.Digest, *req.Size); err != nil {
		return nil, err
	}
	return &protocol.ArtifactCommitResponse{Name: req.Name, Stored: protocol.Stored{Digest: req.Digest, Size: *req.Size}}, nil
}

func (s *Server) artifactFetch(ctx context.Context, l held, req *protocol.FetchRequest) (*protocol.BlobResponse, error) {
	b, err := s.Store.FindArtifact(ctx, l.Runner.ID, l.JobID, l.Lease, req.Job, req.Name)
	if err != nil {
		return nil, err
	}
	url, err := s.CAS.PresignGet(ctx, b.Key)
	if err != nil {
		return nil, err
	}
	return &protocol.BlobResponse{URL: url, Stored: protocol.Stored{Digest: b.Digest, Size: b.Size}}, nil
}

func (s *Server) cacheRestore(ctx context.Context, l held, req *protocol.RestoreRequest) (*protocol.RestoreResponse, error) {
	hit, err := s.Store.RestoreCache(ctx, l.Runner.ID, l.JobID, l.Lease, req.Keys)
	if err != nil || hit == nil {
		return nil, err
	}
	url, err := s.CAS.PresignGet(ctx, hit.Blob.Key)
	if err != nil {
		return nil, err
	}
	return &protocol.RestoreResponse{Key: hit.CacheKey, Scope: hit.Scope,
		BlobResponse: protocol.BlobResponse{URL: url, Stored: protocol.Stored{Digest: hit.Blob.Digest, Size: hit.Blob.Size}}}, nil
}

func (s *Server) cacheSave(ctx context.Context, l held, req *protocol.CacheRequest) (*protocol.UploadResponse, error) {
	// An entry for the key exists already (entries are immutable): the
	// answer tells the runner not to bother uploading.
	up, err := s.Store.PrepareCacheUpload(ctx, l.Runner.ID, l.JobID, l.Lease, req.Key, req.Digest, *req.Size)
	if err != nil {
		return nil, err
	}
	return s.uploadAnswer(ctx, up, *req.Size)
}

func (s *Server) cacheCommit(ctx context.Context, l held, req *protocol.CacheRequest) (*protocol.CacheCommitResponse, error) {
	if err := s.Store.CommitCache(ctx, l.Runner.ID, l.JobID, l.Lease, req.Key, req.Digest, *req.Size); err != nil {
		return nil, err
	}
	return &protocol.CacheCommitResponse{Key: req.Key, Stored: protocol.Stored{Digest: req.Digest, Size: *req.Size}}, nil
}
