// Package client is the runner's side of the ForgeCI runner protocol
// (docs/runner-protocol.md), in the types of package protocol. It speaks
// HTTP only. Network errors and 5xx answers are retried with backoff and
// jitter; an answer that says the job is no longer ours is never retried.
// Job-scoped calls go through a Lease (lease.go), which ends the job's
// context the moment any call learns the lease is gone.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// Client talks to one control plane as one runner.
type Client struct {
	Server string
	Token  string
	HTTP   *http.Client
	// Retries bounds retries of one call (network errors and 5xx).
	Retries int
	// Slots is how many jobs the runner runs at once, said in its claims.
	Slots int
}

// New returns a client with sensible timeouts.
func New(server, token string) *Client {
	return &Client{Server: strings.TrimRight(server, "/"), Token: token,
		HTTP: &http.Client{Timeout: 60 * time.Second}, Retries: 6}
}

// LostLease reports whether err means the job is no longer ours (a 409:
// the lease is not current, expired, or the job ended) or the runner is
// no longer allowed (401): stop and report nothing further.
func LostLease(err error) bool {
	var e *domain.Error
	if !errors.As(err, &e) || e.Status == 0 {
		return false
	}
	return e.Status == http.StatusConflict || domain.Is(err, domain.ELeaseMismatch, domain.ELeaseExpired,
		domain.EJobFinished, domain.EUnauthorized)
}

// Unauthorized reports whether err is the control plane refusing the
// runner's token: a 401 with the control plane's own error body (code
// unauthorized), not one from a proxy in front of it.
func Unauthorized(err error) bool {
	var e tokenRefused
	return errors.As(err, &e)
}

// tokenRefused is a 401 the control plane wrote.
type tokenRefused struct{ err *domain.Error }

func (e tokenRefused) Error() string { return e.err.Error() }
func (e tokenRefused) Unwrap() error { return e.err }

// Retryable reports whether another try may succeed: the request did not
// reach the server or its answer did not come back (any error that is not
// an answer, a client timeout included), or the server could not answer it
// (5xx, 429). Whether the caller still wants it is the caller's context's
// to say, not the error's.
func Retryable(err error) bool {
	var e *domain.Error
	if !errors.As(err, &e) || e.Status == 0 {
		return true
	}
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests
}

// post sends a JSON body and decodes a JSON answer; status 204 leaves out
// untouched and returns (204, nil). Error answers are *domain.Error.
func (c *Client) post(ctx context.Context, path string, in, out any) (int, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return 0, err
	}
	b := Backoff{Base: 200 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 0; ; attempt++ {
		status, err := c.once(ctx, path, body, out)
		if err == nil || !Retryable(err) || attempt >= c.Retries || ctx.Err() != nil {
			return status, err
		}
		if b.Wait(ctx) != nil {
			return status, err
		}
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
		e := protocol.DecodeError(resp.StatusCode, raw)
		var b protocol.ErrorBody
		if resp.StatusCode == http.StatusUnauthorized && json.Unmarshal(raw, &b) == nil && b.Error.Code == domain.EUnauthorized {
			return resp.StatusCode, tokenRefused{e}
		}
		return resp.StatusCode, e
	}
	if h, ok := out.(interface{ setHeader(http.Header) }); ok {
		h.setHeader(resp.Header)
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
	var out protocol.RegisterResponse
	_, err = c.post(ctx, protocol.PathRegister, protocol.RegisterRequest{RegistrationToken: registrationToken, Name: name, Labels: labels}, &out)
	return out.RunnerID, out.Token, err
}

// Features are what this runner declares it can do in every claim.
var Features = []string{domain.FeatureAddMask, domain.FeatureEnvFiles, domain.FeatureExpressions, domain.FeatureIDToken, domain.FeatureJobStatus,
	domain.FeatureOutputs, domain.FeatureSteps, domain.FeatureReports, domain.FeatureVars}

// Claim long-polls for a job; nil when none came within wait.
func (c *Client) Claim(ctx context.Context, labels []string, wait time.Duration) (*protocol.Claim, error) {
	var out protocol.Claim
	req := protocol.ClaimRequest{Labels: labels, WaitSeconds: int(wait.Seconds()), Features: Features,
		Version: Version(), Slots: c.Slots}
	status, err := c.post(ctx, protocol.PathClaim, req, &out)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

// Poll is what an idle poll's "no job" says (docs/runner-protocol.md
// "Idle polls").
type Poll struct {
	Hint  string        // the queue hint to send next time
	After time.Duration // how long to wait before asking again
	// Known is false when the server said neither (it does not answer
	// idle polls, and held the poll as a long poll).
	Known bool
}

type claimAnswer struct {
	protocol.Claim
	poll Poll
}

func (a *claimAnswer) setHeader(h http.Header) {
	a.poll.Hint = h.Get(protocol.HeaderQueueHint)
	if v := h.Get(protocol.HeaderPollAfter); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			a.poll.After, a.poll.Known = min(time.Duration(n)*time.Second, 5*time.Minute), true
		}
	}
}

// ClaimIdle is an idle poll: Claim with the queue hint of the last
// answer's Poll ("" the first time). With no job it returns the Poll.
func (c *Client) ClaimIdle(ctx context.Context, labels []string, wait time.Duration, hint string) (*protocol.Claim, Poll, error) {
	var out claimAnswer
	req := protocol.ClaimRequest{Labels: labels, WaitSeconds: int(wait.Seconds()), Features: Features,
		Version: Version(), Slots: c.Slots, QueueHint: &hint}
	status, err := c.post(ctx, protocol.PathClaim, req, &out)
	if err != nil || status == http.StatusNoContent {
		return nil, out.poll, err
	}
	return &out.Claim, Poll{}, nil
}

// Version is this runner's build: its module version, or the commit it
// was built from (with +dirty), or "dev".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return truncateVersion(v)
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		return "dev"
	case dirty:
		return rev + "+dirty"
	}
	return rev
}

// truncateVersion keeps a version within what a claim may say.
func truncateVersion(v string) string {
	v = strings.Map(func(r rune) rune {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+:@-", r)) {
			return r
		}
		return '-'
	}, v)
	return v[:min(len(v), 64)]
}

// Put uploads size bytes from r to a presigned URL. 412 means the blob
// exists already, which for a content-addressed blob is success.
func (c *Client) Put(ctx context.Context, u protocol.UploadResponse, r io.Reader, size int64) error {
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
