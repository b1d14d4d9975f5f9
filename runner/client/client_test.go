package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// TestStallIsRetried: a request whose answer does not come within the
// client's timeout is tried again, as a dropped connection is.
func TestStallIsRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			time.Sleep(500 * time.Millisecond) // past the client's timeout
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"runner_id":"r1","token":"frt_x"}`))
	}))
	defer srv.Close()
	c := New(srv.URL, "")
	c.HTTP.Timeout = 100 * time.Millisecond
	id, _, err := c.Register(context.Background(), "frg_x", "n", nil)
	if err != nil || id != "r1" {
		t.Fatalf("register after one stalled answer: %q, %v", id, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2", n)
	}
}

// TestLeaseEndsOnConflict: the first 409 of any route ends the held
// lease with ErrLeaseLost and is not retried; a 503 is retried.
func TestLeaseEndsOnConflict(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case 2:
			_, _ = w.Write([]byte(`{"expires_at":"2026-01-01T00:00:00Z","cancel_requested":false}`))
		default:
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":{"code":"lease_mismatch","message":"not yours"}}`))
		}
	}))
	defer srv.Close()
	h := New(srv.URL, "t").Hold(domain.Lease{RunID: "r", JobID: "j", RunnerID: "x", LeaseID: "l", Generation: 1})
	if _, err := h.Heartbeat(context.Background()); err != nil || h.Ended() {
		t.Fatalf("a 503 then 200 heartbeat: %v (ended %v)", err, h.Ended())
	}
	_, err := h.AppendLog(context.Background(), 0, []byte("x"))
	if !domain.Is(err, domain.ELeaseMismatch) || !LostLease(err) {
		t.Fatalf("append after the lease moved on: %v", err)
	}
	if !h.Lost() || !errors.Is(context.Cause(h.Context()), ErrLeaseLost) {
		t.Fatalf("lease not ended as lost: lost %v, cause %v", h.Lost(), context.Cause(h.Context()))
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3 (the 409 is not retried)", n)
	}
}

// TestLeaseEndsWithItsCompletion: an accepted completion ends the lease
// (ErrCompleted); a loss learnt afterwards, as a guard firing late or a
// later generation claimed here, leaves it completed, not lost. A refused
// completion leaves the lease as the refusal says.
func TestLeaseEndsWithItsCompletion(t *testing.T) {
	var refuse atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(`{"state":"RUNNING","job_state":"PASSED"}`))
	}))
	defer srv.Close()
	c := New(srv.URL, "t")
	h := c.Hold(domain.Lease{RunID: "r", JobID: "j", RunnerID: "x", LeaseID: "l", Generation: 1})
	if err := h.Complete(context.Background(), domain.OutcomePassed, 0, ""); err != nil {
		t.Fatal(err)
	}
	if !h.Ended() || !errors.Is(context.Cause(h.Context()), ErrCompleted) {
		t.Fatalf("after its completion: ended %v, cause %v", h.Ended(), context.Cause(h.Context()))
	}
	h.Lose(errors.New("late"))
	if h.Lost() || !errors.Is(context.Cause(h.Context()), ErrCompleted) {
		t.Fatalf("a completed lease made lost: lost %v, cause %v", h.Lost(), context.Cause(h.Context()))
	}
	refuse.Store(true)
	h2 := c.Hold(domain.Lease{RunID: "r", JobID: "j", RunnerID: "x", LeaseID: "l2", Generation: 2})
	if err := h2.Complete(context.Background(), domain.OutcomePassed, 0, ""); err == nil || h2.Ended() {
		t.Fatalf("a refused completion: %v, ended %v", err, h2.Ended())
	}
	h2.Abandon(errors.New("stopping"))
	h2.Lose(errors.New("late"))
	if h2.Lost() {
		t.Fatal("an abandoned lease made lost")
	}
}
