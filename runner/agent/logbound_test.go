package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// logServer answers log appends: 413 too_large (the log cap) when full,
// else each append once release is closed, keeping what it stored.
type logServer struct {
	full    bool
	release chan struct{}
	mu      sync.Mutex
	stored  bytes.Buffer
}

func (s *logServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/"+protocol.RouteLogs) {
		http.Error(w, "{}", http.StatusNotFound)
		return
	}
	var req protocol.LogsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Offset == nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if s.full {
		var b protocol.ErrorBody
		b.Error.Code, b.Error.Message = domain.ETooLarge, "job log would exceed the limit"
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_ = json.NewEncoder(w).Encode(b)
		return
	}
	select {
	case <-s.release:
	case <-r.Context().Done():
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if *req.Offset == int64(s.stored.Len()) {
		s.stored.Write(req.Data)
	}
	_ = json.NewEncoder(w).Encode(protocol.LogsResponse{NextOffset: int64(s.stored.Len())})
}

// held is what the appender holds of the output: bytes and marks.
func (a *logAppender) held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending.Len() + a.mask.Held() + 16*len(a.lines.marks)
}

func boundedAppender(t *testing.T, s *logServer) *logAppender {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	c := client.New(ts.URL, "runner-secret")
	c.HTTP.Timeout = 5 * time.Second
	h := c.Hold(domain.Lease{RunID: "run-1", JobID: "job-1", RunnerID: "runner-1", LeaseID: "lease-1", Generation: 1})
	app := newLogAppender(h, []string{"hunter2-password"})
	ms := int64(0) // every line its own millisecond: a mark each
	app.lines.now = func() time.Time { ms++; return time.UnixMilli(1_700_000_000_000 + ms) }
	go app.loop()
	return app
}

// writeFlood writes 200,000 one-line writes, each its own millisecond
// (a mark each), then 64 MiB more, checking the appender never holds more
// than the bound for bytes and for marks.
func writeFlood(t *testing.T, app *logAppender) {
	t.Helper()
	check := func(written int) {
		if n := app.held(); n > maxHeld+maxHeldMarks*16+len(truncatedLine)+1 {
			t.Fatalf("after %d bytes written the runner holds %d bytes", written, n)
		}
	}
	for i := range 200_000 {
		_, _ = app.Write([]byte("x\n"))
		if i%1000 == 0 {
			check(2 * i)
		}
	}
	chunk := bytes.Repeat([]byte("x\n"), 16<<10)
	for i := range (64 << 20) / len(chunk) {
		_, _ = app.Write(chunk)
		check((i + 1) * len(chunk))
	}
}

// TestLogHeldBoundedAtCap: against a server refusing every append (413,
// the log cap), output written far past the bound is dropped, and Close
// still returns at once with the refusal, so the job can complete.
func TestLogHeldBoundedAtCap(t *testing.T) {
	app := boundedAppender(t, &logServer{full: true})
	writeFlood(t, app)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Close(ctx); !domain.Is(err, domain.ETooLarge) {
		t.Fatalf("close: %v, want too_large", err)
	}
	if n := app.held(); n > 4096 {
		t.Fatalf("%d bytes held after the log was refused", n)
	}
}

// TestLogHeldBoundedWhileBlocked: while the control plane answers no
// append, the runner holds at most the bound; once it answers, the log
// holds the output up to the bound and says it was truncated.
func TestLogHeldBoundedWhileBlocked(t *testing.T) {
	s := &logServer{release: make(chan struct{})}
	app := boundedAppender(t, s)
	writeFlood(t, app)
	close(s.release)
	closeAppender(t, app)
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.stored.String()
	if !strings.HasSuffix(got, truncatedLine) || strings.Count(got, "==> log truncated") != 1 || len(got) > maxHeld+maxBatch+len(truncatedLine)+1 {
		t.Fatalf("stored %d bytes ending %q", len(got), got[max(0, len(got)-200):])
	}
}
