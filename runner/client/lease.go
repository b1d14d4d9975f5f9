package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// ErrLeaseLost is the cause of a held lease's context when the control
// plane said, or the runner must assume, that the job is no longer ours.
var ErrLeaseLost = errors.New("lease lost")

// ErrCompleted is the cause of a held lease's context once its completion
// was accepted: nothing more may be reported under it.
var ErrCompleted = errors.New("completed")

// Lease is one claimed job as the runner holds it. Every job-scoped call
// goes through it and carries its tuple; the first answer that says the
// lease is gone ends Context with ErrLeaseLost, so no call site has to
// remember to check.
type Lease struct {
	c     *Client
	tuple protocol.Leased
	ctx   context.Context
	end   context.CancelCauseFunc
	mu    sync.Mutex // orders the endings: the first one counts
	lost  atomic.Bool
}

// Hold starts holding the lease l.
func (c *Client) Hold(l domain.Lease) *Lease {
	ctx, end := context.WithCancelCause(context.Background())
	return &Lease{c: c, tuple: protocol.WithLease(l), ctx: ctx, end: end}
}

// Context is done when the lease is lost or abandoned; its cause says
// which. Work that must outlive a job's cancel or timeout (flushing the
// log, reporting the outcome) runs under it.
func (h *Lease) Context() context.Context { return h.ctx }

// Lose ends the lease as lost: the runner must assume another may hold
// the job (heartbeats failed for a whole TTL). A lease that had ended
// (completed, abandoned) stays as it ended.
func (h *Lease) Lose(why error) { h.finish(true, fmt.Errorf("%w: %w", ErrLeaseLost, why)) }

// Abandon ends the lease for cause without reporting anything more (the
// runner is stopping); the control plane will see it expire.
func (h *Lease) Abandon(cause error) { h.finish(false, cause) }

// finish ends the lease with cause, unless it had ended: only the first
// ending counts, so that a guard firing after the completion does not
// make a completed lease lost.
func (h *Lease) finish(lost bool, cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return
	}
	h.lost.Store(lost)
	h.end(cause)
}

// Tuple is the lease as the control plane granted it.
func (h *Lease) Tuple() domain.Lease { return *h.tuple.Lease }

// Lost reports whether the lease was lost (not merely abandoned).
func (h *Lease) Lost() bool { return h.lost.Load() }

// Ended reports whether nothing more may be reported under this lease.
func (h *Lease) Ended() bool { return h.ctx.Err() != nil }

// call posts one job-scoped request and learns from its answer.
func (h *Lease) call(ctx context.Context, route string, in, out any) (int, error) {
	status, err := h.c.post(ctx, protocol.JobPath(h.tuple.Lease.JobID, route), in, out)
	if LostLease(err) {
		h.Lose(err)
	}
	return status, err
}

// answer posts one job-scoped request and decodes its answer.
func answer[T any](ctx context.Context, h *Lease, route string, in any) (T, error) {
	var out T
	_, err := h.call(ctx, route, in, &out)
	return out, err
}

// Heartbeat extends the lease; it reports whether a user asked to cancel.
func (h *Lease) Heartbeat(ctx context.Context) (cancel bool, err error) {
	var out protocol.HeartbeatResponse
	_, err = h.call(ctx, protocol.RouteHeartbeat, protocol.HeartbeatRequest{Leased: h.tuple}, &out)
	return out.CancelRequested, err
}

// Source returns the presigned source URL and digests.
func (h *Lease) Source(ctx context.Context) (protocol.SourceResponse, error) {
	return answer[protocol.SourceResponse](ctx, h, protocol.RouteSource, protocol.SourceRequest{Leased: h.tuple})
}

// AppendLog appends data at offset and returns the new end. A 416 comes
// back as a *domain.Error with NextOffset.
func (h *Lease) AppendLog(ctx context.Context, offset int64, data []byte) (int64, error) {
	return h.AppendLogWith(ctx, offset, data, nil, nil)
}

// AppendLogWith is AppendLog with the marks of data's lines and the step
// events the append carries.
func (h *Lease) AppendLogWith(ctx context.Context, offset int64, data []byte, times []protocol.LineTime, steps []protocol.StepEvent) (int64, error) {
	var out protocol.LogsResponse
	_, err := h.call(ctx, protocol.RouteLogs, protocol.LogsRequest{Leased: h.tuple, Offset: &offset, Data: data,
		Times: times, Steps: steps}, &out)
	return out.NextOffset, err
}

// StartArtifact asks where to upload an artifact blob.
func (h *Lease) StartArtifact(ctx context.Context, name, digest string, size int64) (protocol.UploadResponse, error) {
	return answer[protocol.UploadResponse](ctx, h, protocol.RouteArtifacts, protocol.ArtifactRequest{Leased: h.tuple, Name: name, Blob: protocol.NewBlob(digest, size)})
}

// CommitArtifact registers an uploaded artifact.
func (h *Lease) CommitArtifact(ctx context.Context, name, digest string, size int64) error {
	_, err := h.call(ctx, protocol.RouteArtifactCommit, protocol.ArtifactRequest{Leased: h.tuple, Name: name, Blob: protocol.NewBlob(digest, size)}, nil)
	return err
}

// FetchArtifact returns where to download an artifact of a needed job.
func (h *Lease) FetchArtifact(ctx context.Context, job, name string) (protocol.BlobResponse, error) {
	return answer[protocol.BlobResponse](ctx, h, protocol.RouteArtifactFetch, protocol.FetchRequest{Leased: h.tuple, Job: job, Name: name})
}

// RestoreCache returns the first matching cache entry, or nil.
func (h *Lease) RestoreCache(ctx context.Context, keys []string) (*protocol.RestoreResponse, error) {
	var out protocol.RestoreResponse
	status, err := h.call(ctx, protocol.RouteCacheRestore, protocol.RestoreRequest{Leased: h.tuple, Keys: keys}, &out)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

// StartCache asks where to upload a cache blob.
func (h *Lease) StartCache(ctx context.Context, key, digest string, size int64) (protocol.UploadResponse, error) {
	return answer[protocol.UploadResponse](ctx, h, protocol.RouteCacheSave, protocol.CacheRequest{Leased: h.tuple, Key: key, Blob: protocol.NewBlob(digest, size)})
}

// CommitCache stages an uploaded cache entry (published if the job passes).
func (h *Lease) CommitCache(ctx context.Context, key, digest string, size int64) error {
	_, err := h.call(ctx, protocol.RouteCacheCommit, protocol.CacheRequest{Leased: h.tuple, Key: key, Blob: protocol.NewBlob(digest, size)}, nil)
	return err
}

// SendReport sends the summary of the job's test reports.
func (h *Lease) SendReport(ctx context.Context, sum protocol.TestSummary) error {
	_, err := h.call(ctx, protocol.RouteReport, protocol.ReportRequest{Leased: h.tuple, Summary: sum}, nil)
	return err
}

// SetOutputs sends the job's outputs (a name sent again replaces its
// value).
func (h *Lease) SetOutputs(ctx context.Context, outputs map[string]string) error {
	_, err := h.call(ctx, protocol.RouteOutputs, protocol.OutputsRequest{Leased: h.tuple, Outputs: outputs}, nil)
	return err
}

// IDToken asks for an identity token for audience, bound to the lease
// (the job's pipeline must have asked for them: id_token). A job being
// canceled is refused with 409 conflict: its lease still holds (the
// heartbeat learns of the cancel and stops the job, which then reports
// canceled), so that answer does not end it.
func (h *Lease) IDToken(ctx context.Context, audience string) (protocol.IDTokenResponse, error) {
	var out protocol.IDTokenResponse
	req := protocol.IDTokenRequest{Leased: h.tuple, Audience: audience}
	_, err := h.c.post(ctx, protocol.JobPath(h.tuple.Lease.JobID, protocol.RouteIDToken), req, &out)
	if LostLease(err) && !domain.Is(err, domain.EConflict) {
		h.Lose(err)
	}
	return out, err
}

// Complete reports the outcome; reason (optional) says why a job failed.
// Once it is accepted the lease has ended (ErrCompleted).
func (h *Lease) Complete(ctx context.Context, outcome domain.Outcome, exitCode int, reason string) error {
	_, err := h.call(ctx, protocol.RouteComplete, protocol.CompleteRequest{Leased: h.tuple, Outcome: outcome, ExitCode: &exitCode, Reason: reason}, nil)
	if err == nil {
		h.finish(false, ErrCompleted)
	}
	return err
}
