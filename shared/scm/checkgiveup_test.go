package scm_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestCheckPushGivenUp: a check run GitHub refuses for good (here every
// create answers 404, as for a repository deleted since) is given up
// after MaxCheckAttempts pushes, its error kept; nothing is then due, so
// an idle stack's GitHub worker stops waking the database for it.
func TestCheckPushGivenUp(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	dir, sha := gitRepo(t, "") // no pipeline: the commit gets a notice
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-gone", body, sign(repoSecret, body))

	target, _ := url.Parse(e.gh.URL())
	forward := httputil.NewSingleHostReverseProxy(target)
	var creates atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/check-runs") {
			creates.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"Not Found"}`))
			return
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	w := e.workerAt(proxy.URL + "/")
	w.MaxCheckAttempts = 3
	for i := 0; ; i++ {
		if _, err := w.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if e.count(`SELECT count(*) FROM check_runs WHERE version > pushed_version`) == 0 {
			break
		}
		if i == 100 {
			t.Fatalf("the notice was still due after %d passes (%d creates)", i, creates.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := creates.Load(); n != 3 {
		t.Fatalf("%d creates, want MaxCheckAttempts (3)", n)
	}
	if n := e.count(`SELECT count(*) FROM check_runs WHERE last_error LIKE 'given up after 3 attempts: %Not Found%'`); n != 1 {
		t.Fatalf("%d given-up notices with their error", n)
	}
	if next, err := e.store.NextSCM(ctx); err != nil || !next.IsZero() {
		t.Fatalf("the GitHub worker is due again at %v (%v)", next, err)
	}
	if _, err := w.RunOnce(ctx); err != nil || creates.Load() != 3 {
		t.Fatalf("a later pass: %v, %d creates", err, creates.Load())
	}
}
