package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/mask"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/protocol"
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

// logSetup serves the real API (through wrap, when given) over a fresh
// database and claims one job: it returns the store, a client and the
// claim.
func logSetup(t *testing.T, wrap func(http.Handler) http.Handler) (*store.Store, *client.Client, *protocol.Claim) {
	t.Helper()
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, st, "p")
	srv := &api.Server{Store: st, CAS: castest.New(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
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
	return st, c, claim
}

// storedLog is the whole stored log of the claim's attempt.
func storedLog(t *testing.T, st *store.Store, c *protocol.Claim) []byte {
	t.Helper()
	got, _, err := st.ReadLog(context.Background(), c.Lease.RunID, c.Lease.JobID, 0, 0, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func closeAppender(t *testing.T, app *logAppender) {
	t.Helper()
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := app.Close(cctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestLogOrderUnderNetworkFaults: with a third of appends failing before or
// after the server acted, the stored log is exactly the bytes written,
// masked, in order, with nothing duplicated or lost. Secrets are written
// cut at random places, so batches end inside them: a batch resent after
// a lost answer must repeat the masked bytes exactly, or the server
// refuses it (416) and the close fails.
func TestLogOrderUnderNetworkFaults(t *testing.T) {
	var f *faulty
	st, c, claim := logSetup(t, func(h http.Handler) http.Handler { f = &faulty{next: h}; return f })
	secrets := []string{"hunter2-password", "line-one-of-it\nline-two-of-it"}
	h := c.Hold(claim.Lease)
	app := newLogAppender(h, secrets)
	app.every = 2 * time.Millisecond // many small batches, so many faults
	go app.loop()
	var want bytes.Buffer
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		line := fmt.Sprintf("line %05d %s\n", i, strings.Repeat("x", rng.IntN(200)))
		if i%7 == 0 {
			line = fmt.Sprintf("line %05d token=%s\n", i, secrets[rng.IntN(len(secrets))])
		}
		want.WriteString(line)
		cut := rng.IntN(len(line) + 1)
		_, _ = app.Write([]byte(line[:cut]))
		_, _ = app.Write([]byte(line[cut:]))
		if i%10 == 0 {
			time.Sleep(3 * time.Millisecond) // let batches go out between writes
		}
	}
	closeAppender(t, app)
	if h.Lost() {
		t.Fatal("lease lost")
	}
	got := storedLog(t, st, claim)
	if masked := mask.New(secrets).Bytes(want.Bytes()); !bytes.Equal(got, masked) {
		t.Fatalf("stored log differs: %d bytes stored, %d written (%d masked)", len(got), want.Len(), len(masked))
	}
	if bytes.Contains(got, []byte("hunter2")) || bytes.Contains(got, []byte("line-two")) {
		t.Fatal("a secret reached the stored log")
	}
	if f.before.Load() == 0 || f.after.Load() == 0 {
		t.Fatalf("no faults were injected (%d before, %d after, %d appends)", f.before.Load(), f.after.Load(), f.seen.Load())
	}
	t.Logf("%d bytes intact through %d failed and %d lost-answer appends", len(got), f.before.Load(), f.after.Load())
}

// TestSecretAcrossFlushes: a secret printed in two halves 0.7 s apart, with
// the real flush timer sending batches in between, is masked; during the
// pause only the half that may begin the secret is held back; multi-line
// secrets printed line by line, base64 inside longer base64 at each
// alignment and URL-encoded forms are masked too.
func TestSecretAcrossFlushes(t *testing.T) {
	st, c, claim := logSetup(t, nil)
	key := "-----BEGIN KEY-----\r\nMIIBVwIBADANBgkqhkiG9w0B\r\n-----END KEY-----"
	secret := "s3cr3t/value+with&query"
	app := newLogAppender(c.Hold(claim.Lease), []string{secret, key})
	go app.loop()

	_, _ = app.Write([]byte("before " + secret[:9]))
	time.Sleep(700 * time.Millisecond) // several flush ticks
	if got := string(storedLog(t, st, claim)); got != "before " {
		t.Fatalf("during the pause the log is %q, want %q (the half secret held back)", got, "before ")
	}
	var text strings.Builder
	text.WriteString("before " + secret[:9])
	write := func(s string) {
		text.WriteString(s)
		_, _ = app.Write([]byte(s))
	}
	write(secret[9:] + " after\n")
	for line := range strings.SplitSeq(key, "\n") {
		write("echo: " + line + "\n")
		time.Sleep(250 * time.Millisecond)
	}
	for k := range 3 { // base64 of the secret at each byte alignment
		pre := strings.Repeat("p", k+3)
		write(base64.StdEncoding.EncodeToString([]byte(pre+secret+"tail")) + "\n")
		write(base64.RawURLEncoding.EncodeToString([]byte(pre+secret)) + "\n")
	}
	write("curl -d v=" + url.QueryEscape(secret) + " /p/" + url.PathEscape(secret) + "\n")
	write("the end, not a secret: s3cr3") // held back until Close
	closeAppender(t, app)

	got := string(storedLog(t, st, claim))
	for _, leak := range []string{"s3cr3t", "MIIBVwIBADANBgkqhkiG9w0B", "BEGIN KEY", "value%2Bwith"} {
		if strings.Contains(got, leak) {
			t.Errorf("%q in the stored log:\n%s", leak, got)
		}
	}
	if strings.Count(got, "***") < 12 || !strings.HasSuffix(got, "not a secret: s3cr3") {
		t.Errorf("stored log:\n%s", got)
	}
	if want := mask.New([]string{secret, key}).String(text.String()); got != want {
		t.Errorf("stored log is not the whole output masked:\n%s\nwant\n%s", got, want)
	}
}

// TestRedaction: the runner token and secret-looking env values never
// reach the log; the step environment does not carry the runner's own.
func TestRedaction(t *testing.T) {
	a := newLogAppender(nil, []string{"frt_supersecrettoken", "hunter2-password", "abc"})
	_, _ = a.Write([]byte("token=frt_supersecrettoken pw=hunter2-password abc ok"))
	got := a.pending.String()
	if strings.Contains(got, "supersecret") || strings.Contains(got, "hunter2") || !strings.Contains(got, "abc ok") {
		t.Fatalf("scrubbed: %q", got)
	}
	t.Setenv("FORGECI_RUNNER_SECRET", "leak")
	j := &job{claim: &protocol.Claim{Job: domain.ClaimedJob{Name: "j", JobSpec: domain.JobSpec{Env: map[string]string{"A": "1"}}}}, ws: "/w"}
	env := strings.Join(j.env(domain.Step{Env: map[string]string{"B": "2"}}), "\n")
	if strings.Contains(env, "leak") || !strings.Contains(env, "A=1") || !strings.Contains(env, "B=2") || !strings.Contains(env, "CI=true") {
		t.Fatalf("step env:\n%s", env)
	}
	if !looksSecret("GITHUB_TOKEN") || !looksSecret("db_password") || looksSecret("GOFLAGS") {
		t.Fatal("looksSecret")
	}
}
