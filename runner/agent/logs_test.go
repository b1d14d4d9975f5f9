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
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// faulty wraps the real API and breaks a share of log appends: some get a
// 503 before reaching the handler, some reach it and then lose their answer
// (the connection is dropped after the append committed).
type faulty struct {
	next            http.Handler
	rng             *rand.Rand
	before, after   atomic.Int64
	seen            atomic.Int64
	beforeP, afterP float64
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/logs") {
		f.next.ServeHTTP(w, r)
		return
	}
	x := f.rng.Float64()
	f.seen.Add(1)
	switch {
	case x < f.beforeP:
		f.before.Add(1)
		http.Error(w, "injected", http.StatusServiceUnavailable)
	case x < f.beforeP+f.afterP:
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
	srv := &api.Server{Store: st, CAS: castest.New(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f := &faulty{next: srv.Handler(), rng: rand.New(rand.NewPCG(1, 2)), beforeP: 0.15, afterP: 0.2}
	ts := httptest.NewServer(f)
	defer ts.Close()

	reg, _, _ := st.CreateRegistrationToken(ctx, time.Minute, "")
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
