package scm_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/scm"
)

// TestCheckPushGivenUp: a check run GitHub refuses as gone (here every
// create answers 404, as for a repository deleted since) is given up
// after MaxCheckAttempts pushes, its error kept; nothing is then due, so
// an idle stack's GitHub worker stops waking the database for it. One
// that fails otherwise (503: an outage) is tried for as long as it fails.
func TestCheckPushGivenUp(t *testing.T) {
	gone := checksAnswering(t, http.StatusNotFound)
	gone.passUntilSettled(t, 100)
	if n := gone.creates.Load(); n != 3 {
		t.Fatalf("%d creates, want MaxCheckAttempts (3)", n)
	}
	if n := gone.e.count(`SELECT count(*) FROM check_runs WHERE last_error LIKE 'given up after 3 refusals in a row: %Not Found%'`); n != 1 {
		t.Fatalf("%d given-up notices with their error", n)
	}
	ctx := context.Background()
	if next, err := gone.e.store.NextSCM(ctx); err != nil || !next.IsZero() {
		t.Fatalf("the GitHub worker is due again at %v (%v)", next, err)
	}
	if _, err := gone.w.RunOnce(ctx); err != nil || gone.creates.Load() != 3 {
		t.Fatalf("a later pass: %v, %d creates", err, gone.creates.Load())
	}

	down := checksAnswering(t, http.StatusServiceUnavailable)
	for i := 0; i < 100 && down.creates.Load() < 6; i++ {
		down.passUntilSettled(t, 1)
		time.Sleep(25 * time.Millisecond)
	}
	if n := down.e.count(`SELECT count(*) FROM check_runs WHERE version > pushed_version AND last_error NOT LIKE 'given up%'`); n != 1 {
		t.Fatalf("the notice of an outage is given up after %d creates", down.creates.Load())
	}
	// After the outage, GitHub refuses it as gone once: a first refusal,
	// not the last of many.
	down.status.Store(http.StatusNotFound)
	for i := 0; i < 100 && down.creates.Load() < 7; i++ {
		down.passUntilSettled(t, 1)
		time.Sleep(25 * time.Millisecond)
	}
	if n := down.e.count(`SELECT count(*) FROM check_runs WHERE version > pushed_version AND gone_attempts = 1`); n != 1 {
		t.Fatalf("a first refusal after an outage of %d failures was given up", down.creates.Load()-1)
	}
}

type checkFixture struct {
	e       *env
	w       *scm.Worker
	creates *atomic.Int64
	status  *atomic.Int64 // what a create is answered (0: the fake answers)
}

// checksAnswering is a worker whose every check run create gets status,
// and a commit without a pipeline delivered: its notice is due.
func checksAnswering(t *testing.T, status int) checkFixture {
	e := setup(t)
	dir, sha := gitRepo(t, "") // no pipeline: the commit gets a notice
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-refused", body, sign(repoSecret, body))

	target, _ := url.Parse(e.gh.URL())
	forward := httputil.NewSingleHostReverseProxy(target)
	creates, answer := &atomic.Int64{}, &atomic.Int64{}
	answer.Store(int64(status))
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := int(answer.Load())
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/check-runs") && code != 0 {
			creates.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = fmt.Fprintf(w, `{"message":%q}`, http.StatusText(code))
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	w := e.workerAt(proxy.URL + "/")
	w.MaxCheckAttempts = 3
	return checkFixture{e, w, creates, answer}
}

// passUntilSettled runs the worker until no check run is due, at most
// passes times (the last may leave one due).
func (f checkFixture) passUntilSettled(t *testing.T, passes int) {
	t.Helper()
	for i := 0; i < passes; i++ {
		if _, err := f.w.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if f.e.count(`SELECT count(*) FROM check_runs WHERE version > pushed_version`) == 0 {
			return
		}
		if passes > 1 && i == passes-1 {
			t.Fatalf("the notice was still due after %d passes (%d creates)", passes, f.creates.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An installation token GitHub revoked before it expired (401) is dropped:
// the next push asks for a new one and goes through, rather than fail
// with the old one, counted as refusals, until it would have expired.
func TestRevokedTokenIsForgotten(t *testing.T) {
	f := checksAnswering(t, http.StatusNotFound)
	f.status.Store(0) // creates go through to the fake
	f.passUntilSettled(t, 100)
	f.e.gh.RevokeTokens()
	if _, err := f.e.pool.Exec(context.Background(), `UPDATE check_runs SET version = version + 1, next_attempt_at = now()`); err != nil {
		t.Fatal(err)
	}
	f.passUntilSettled(t, 20)
	if n := f.e.count(`SELECT count(*) FROM check_runs WHERE version = pushed_version AND last_error IS NULL`); n != 1 {
		t.Fatal("the notice was not pushed after its token was revoked")
	}
}

// A delivery whose installation token GitHub revoked early (401) is tried
// again with a new one, and makes its run.
func TestDeliveryAfterTheTokenIsRevoked(t *testing.T) {
	e := setup(t)
	for i, guid := range []string{"before", "after"} {
		dir, sha := gitRepo(t, pipelineYAML+"# "+guid+"\n")
		e.gh.AddGitCommit(t, repoName, dir, sha)
		body := pushPayload(sha)
		e.deliver("push", guid, body, sign(repoSecret, body))
		if i == 1 {
			e.gh.RevokeTokens() // the first delivery's token is cached
		}
		for pass := 0; e.count(`SELECT count(*) FROM runs`) < i+1; pass++ {
			if pass == 20 {
				t.Fatalf("the delivery %q made no run: %d attempts", guid, e.count(`SELECT attempts FROM scm_deliveries WHERE guid = $1`, guid))
			}
			e.runOnce()
			time.Sleep(25 * time.Millisecond)
		}
	}
}
