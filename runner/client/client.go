// Package client is the runner's side of the ForgeCI runner protocol
// (DESIGN.md). It speaks HTTP only. Network errors and 5xx answers are
// retried with backoff and jitter; a 409 is never retried: it means the
// runner no longer owns the job.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// Client talks to one control plane as one runner.
type Client struct {
	Server string
	Token  string
	HTTP   *http.Client
	// Retries bounds retries of one call (network errors and 5xx).
	Retries int
}

// Error is an error answer.
type Error struct {
	Status     int
	Code       string
	Message    string
	NextOffset *int64
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// LostLease reports whether err means the job is no longer ours (409) or
// the runner is no longer allowed (401): stop and report nothing further.
func LostLease(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Status == http.StatusConflict || e.Status == http.StatusUnauthorized)
}

// New returns a client with sensible timeouts.
func New(server, token string) *Client {
	return &Client{Server: strings.TrimRight(server, "/"), Token: token,
		HTTP: &http.Client{Timeout: 60 * time.Second}, Retries: 6}
}

// post sends a JSON body and decodes a JSON answer; status 204 leaves out
// untouched and returns (204, nil).
func (c *Client) post(ctx context.Context, path string, in, out any) (int, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return 0, err
	}
	delay := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		status, err := c.once(ctx, path, body, out)
		if err == nil {
			return status, nil
		}
		var e *Error
		retryable := !errors.As(err, &e) || e.Status >= 500
		if !retryable || attempt >= c.Retries || ctx.Err() != nil {
			return status, err
		}
		// Full jitter, so that runners cut off together do not return together.
		sleep := time.Duration(rand.Int64N(int64(delay))) + delay/2
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(sleep):
		}
		delay = min(delay*2, 10*time.Second)
	}
}

func (c *Client) once(ctx context.Context, path string, body []byte, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Server+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		var eb struct {
			Error      struct{ Code, Message string }
			NextOffset *int64 `json:"next_offset"`
		}
		_ = json.Unmarshal(raw, &eb)
		return resp.StatusCode, &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, NextOffset: eb.NextOffset}
	}
	if out != nil && resp.StatusCode != http.StatusNoContent && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode answer of %s: %w", path, err)
		}
	}
	return resp.StatusCode, nil
}

// Register exchanges a registration token for a runner ID and token.
func (c *Client) Register(ctx context.Context, registrationToken, name string, labels []string) (id, token string, err error) {
	var out struct {
		RunnerID string `json:"runner_id"`
		Token    string `json:"token"`
	}
	_, err = c.post(ctx, "/v1/runners/register", map[string]any{"registration_token": registrationToken, "name": name, "labels": labels}, &out)
	return out.RunnerID, out.Token, err
}

// Claim long-polls for a job; nil when none came within wait.
func (c *Client) Claim(ctx context.Context, labels []string, wait time.Duration) (*domain.Claim, error) {
	var out domain.Claim
	status, err := c.post(ctx, "/v1/runner/claim", map[string]any{"labels": labels, "wait_seconds": int(wait.Seconds())}, &out)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

func jobPath(l domain.Lease, route string) string { return "/v1/runner/jobs/" + l.JobID + "/" + route }

func withLease(l domain.Lease, extra map[string]any) map[string]any {
	m := map[string]any{"lease": leaseOnly(l)}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func leaseOnly(l domain.Lease) domain.Lease {
	l.ExpiresAt = nil
	return l
}

// Heartbeat extends the lease.
func (c *Client) Heartbeat(ctx context.Context, l domain.Lease) (cancel bool, err error) {
	var out struct {
		CancelRequested bool `json:"cancel_requested"`
	}
	_, err = c.post(ctx, jobPath(l, "heartbeat"), withLease(l, nil), &out)
	return out.CancelRequested, err
}

// Blob is where to download a blob.
type Blob struct {
	URL            string `json:"url"`
	Digest         string `json:"digest"`
	BlobDigest     string `json:"blob_digest"`
	ManifestDigest string `json:"manifest_digest"`
	Size           int64  `json:"size"`
	Key            string `json:"key"`
}

// Source returns the presigned source URL.
func (c *Client) Source(ctx context.Context, l domain.Lease) (Blob, error) {
	var b Blob
	_, err := c.post(ctx, jobPath(l, "source"), withLease(l, nil), &b)
	return b, err
}

// AppendLog appends data at offset and returns the new end. A 416 comes
// back as *Error with NextOffset.
func (c *Client) AppendLog(ctx context.Context, l domain.Lease, offset int64, data []byte) (int64, error) {
	var out struct {
		NextOffset int64 `json:"next_offset"`
	}
	_, err := c.post(ctx, jobPath(l, "logs"), withLease(l, map[string]any{"offset": offset, "data": data}), &out)
	return out.NextOffset, err
}

// Upload is where to PUT a blob, unless it exists.
type Upload struct {
	Exists    bool              `json:"exists"`
	KeyExists bool              `json:"key_exists"`
	URL       string            `json:"upload_url"`
	Method    string            `json:"upload_method"`
	Headers   map[string]string `json:"upload_headers"`
}

// StartArtifact asks where to upload an artifact blob.
func (c *Client) StartArtifact(ctx context.Context, l domain.Lease, name, digest string, size int64) (Upload, error) {
	var u Upload
	_, err := c.post(ctx, jobPath(l, "artifacts"), withLease(l, map[string]any{"name": name, "digest": digest, "size": size}), &u)
	return u, err
}

// CommitArtifact registers an uploaded artifact.
func (c *Client) CommitArtifact(ctx context.Context, l domain.Lease, name, digest string, size int64) error {
	_, err := c.post(ctx, jobPath(l, "artifacts/commit"), withLease(l, map[string]any{"name": name, "digest": digest, "size": size}), nil)
	return err
}

// FetchArtifact returns where to download an artifact of a needed job.
func (c *Client) FetchArtifact(ctx context.Context, l domain.Lease, job, name string) (Blob, error) {
	var b Blob
	_, err := c.post(ctx, jobPath(l, "artifacts/fetch"), withLease(l, map[string]any{"job": job, "name": name}), &b)
	return b, err
}

// RestoreCache returns the first matching cache entry, or nil.
func (c *Client) RestoreCache(ctx context.Context, l domain.Lease, keys []string) (*Blob, error) {
	var b Blob
	status, err := c.post(ctx, jobPath(l, "cache/restore"), withLease(l, map[string]any{"keys": keys}), &b)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &b, nil
}

// StartCache asks where to upload a cache blob.
func (c *Client) StartCache(ctx context.Context, l domain.Lease, key, digest string, size int64) (Upload, error) {
	var u Upload
	_, err := c.post(ctx, jobPath(l, "cache/save"), withLease(l, map[string]any{"key": key, "digest": digest, "size": size}), &u)
	return u, err
}

// CommitCache stages an uploaded cache entry (published if the job passes).
func (c *Client) CommitCache(ctx context.Context, l domain.Lease, key, digest string, size int64) error {
	_, err := c.post(ctx, jobPath(l, "cache/commit"), withLease(l, map[string]any{"key": key, "digest": digest, "size": size}), nil)
	return err
}

// Complete reports the outcome; reason (optional) says why a job failed.
func (c *Client) Complete(ctx context.Context, l domain.Lease, outcome string, exitCode int, reason string) error {
	_, err := c.post(ctx, jobPath(l, "complete"), withLease(l, map[string]any{"outcome": outcome, "exit_code": exitCode, "reason": reason}), nil)
	return err
}

// Put uploads size bytes from r to a presigned URL. 412 means the blob
// exists already, which for a content-addressed blob is success.
func (c *Client) Put(ctx context.Context, u Upload, r io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, u.Method, u.URL, r)
	if err != nil {
		return err
	}
	req.ContentLength = size
	for k, v := range u.Headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != http.StatusPreconditionFailed {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return fmt.Errorf("upload: HTTP %d: %s", resp.StatusCode, msg)
	}
	return nil
}
