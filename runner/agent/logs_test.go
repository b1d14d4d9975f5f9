package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// faulty wraps the real API and breaks a share of log appends: some get a
// 503 before reaching the handler, some reach it and then lose their answer
// (the connection is dropped after the append committed).
type faulty struct {
	next          http.Handler
	before, after atomic.Int64
	seen          atomic.Int64
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/logs") {
		f.next.ServeHTTP(w, r)
		return
	}
	// Deterministic: every third append fails before the handler, every
	// fourth (not third) loses its answer after it.
	n := f.seen.Add(1)
	switch {
	case n%3 == 0:
		f.before.Add(1)
		http.Error(w, "injected", http.StatusServiceUnavailable)
	case n%4 == 0:
		f.after.Add(1)
		f.next.ServeHTTP(httptest.NewRecorder(), r) // the append happens...
		conn, _, err := w.(http.Hijacker).Hijack()  // ...and its answer is lost
		if err == nil {
			conn.Close()
		}
	default:
		f.next.ServeHTTP(w, r)
	}
}

// TestLogOrderUnderNetworkFaults: with a third of appends failing before or
// after the server acted, the stored log is exactly the bytes written, in
// order, with nothing duplicated or lost.
func TestLogOrderUnderNetworkFaults(t *testing.T) {
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, st, "p")
	srv := &api.Server{Store: st, CAS: castest.New(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f := &faulty{next: srv.Handler()}
	ts := httptest.NewServer(f)
	defer ts.Close()

	reg, _, _ := st.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	_, token, err := st.RegisterRunner(ctx, reg, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "j"}}}); err != nil {
		t.Fatal(err)
	}
	c := client.New(ts.URL, token)
	c.HTTP.Timeout = 5 * time.Second
	claim, err := c.Claim(ctx, nil, 0)
	if err != nil || claim == nil {
		t.Fatal(err)
	}
	lost := false
	app := newLogAppender(c, claim.Lease, nil, func() { lost = true })
	app.every = 2 * time.Millisecond // many small batches, so many faults
	go app.loop()
	var want bytes.Buffer
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		line := fmt.Sprintf("line %05d %s\n", i, strings.Repeat("x", rng.IntN(200)))
		want.WriteString(line)
		_, _ = app.Write([]byte(line))
		if i%10 == 0 {
			time.Sleep(3 * time.Millisecond) // let batches go out between writes
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := app.Close(cctx); err != nil || lost {
		t.Fatalf("close: %v (lost %v)", err, lost)
	}
	got, _, err := st.ReadLog(ctx, claim.Lease.RunID, claim.Lease.JobID, 0, 0, int64(want.Len())+1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("stored log differs: %d bytes stored, %d written", len(got), want.Len())
	}
	if f.before.Load() == 0 || f.after.Load() == 0 {
		t.Fatalf("no faults were injected (%d before, %d after, %d appends)", f.before.Load(), f.after.Load(), f.seen.Load())
	}
	t.Logf("%d bytes intact through %d failed and %d lost-answer appends", len(got), f.before.Load(), f.after.Load())
}

// TestRedaction: the runner token and secret-looking env values never
// reach the log; the step environment does not carry the runner's own.
func TestRedaction(t *testing.T) {
	a := newLogAppender(nil, domain.Lease{}, []string{"frt_supersecrettoken", "hunter2-password"}, func() {})
	got := string(a.scrub([]byte("token=frt_supersecrettoken pw=hunter2-password ok")))
	if strings.Contains(got, "supersecret") || strings.Contains(got, "hunter2") || !strings.Contains(got, "ok") {
		t.Fatalf("scrubbed: %q", got)
	}
	t.Setenv("FORGECI_RUNNER_SECRET", "leak")
	j := &job{claim: &domain.Claim{Job: domain.ClaimedJob{Name: "j", JobSpec: domain.JobSpec{Env: map[string]string{"A": "1"}}}}, ws: "/w"}
	env := strings.Join(j.env(domain.Step{Env: map[string]string{"B": "2"}}), "\n")
	if strings.Contains(env, "leak") || !strings.Contains(env, "A=1") || !strings.Contains(env, "B=2") || !strings.Contains(env, "CI=true") {
		t.Fatalf("step env:\n%s", env)
	}
	if !looksSecret("GITHUB_TOKEN") || !looksSecret("db_password") || looksSecret("GOFLAGS") {
		t.Fatal("looksSecret")
	}
}
