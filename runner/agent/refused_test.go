package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/runner/client"
)

// TestRefusedTokenStopsTheRunner: a runner whose token the control plane
// refuses (401: revoked) stops claiming on every slot and says why,
// rather than polling on, each poll a lookup in the database that keeps
// it from pausing.
func TestRefusedTokenStopsTheRunner(t *testing.T) {
	var claims atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claims.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"code":"unauthorized","message":"unknown or revoked runner token"}}`)
	}))
	defer srv.Close()
	a := New(Config{Client: client.New(srv.URL, "frt_revoked"), WorkDir: t.TempDir(), Concurrency: 3,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTokenRefused) {
			t.Fatalf("Run ended with %v, want ErrTokenRefused", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the runner still polls with a refused token (%d claims)", claims.Load())
	}
	if n := claims.Load(); n > 3 {
		t.Fatalf("%d claims with a refused token by 3 slots", n)
	}
}

// TestProxy401KeepsTheRunner: a 401 that is not the control plane's own
// answer (a proxy in front of it, for a while) is an error to retry, not
// a refused token.
func TestProxy401KeepsTheRunner(t *testing.T) {
	var claims atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claims.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "<html>401 Authorization Required</html>")
	}))
	defer srv.Close()
	a := New(Config{Client: client.New(srv.URL, "frt_ok"), WorkDir: t.TempDir(), Concurrency: 1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for deadline := time.Now().Add(20 * time.Second); claims.Load() < 2; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the runner stopped at a proxy's 401: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner did not try again after a proxy's 401")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after its context ended: %v", err)
	}
}
