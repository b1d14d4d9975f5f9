package scm_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCheckPushEndsWithinItsLease: a check run's push that GitHub does not
// answer is given up within the check run's lease, before another worker
// may take the row, so two pushes of one check run never overlap (a
// second check run made beside the first, or an old state sent after a
// newer one). The check run is then pushed once: one per job.
func TestCheckPushEndsWithinItsLease(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-silent", body, sign(repoSecret, body))

	// GitHub, except that the first create is never answered (nor made).
	target, _ := url.Parse(e.gh.URL())
	forward := httputil.NewSingleHostReverseProxy(target)
	gaveUp := make(chan time.Duration, 1)
	var once sync.Once
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/check-runs") {
			silent := false
			once.Do(func() { silent = true })
			if silent {
				start := time.Now()
				_, _ = io.Copy(io.Discard, r.Body) // so the server sees the client go
				<-r.Context().Done()               // the worker gave up
				gaveUp <- time.Since(start)
				return
			}
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	const lease = 2 * time.Second
	w := e.workerAt(proxy.URL + "/")
	w.CheckLease = lease
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case took := <-gaveUp:
		if took >= lease {
			t.Fatalf("the unanswered create was given up after %v, not within the check run's %v lease", took, lease)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never sent the create")
	}
	e.finishJobs()
	e.reconcile()
	checks := e.gh.CheckRuns(repoName)
	names := map[string]int{}
	for _, c := range checks {
		names[c.Name]++
		if c.Status != "completed" {
			t.Errorf("check run %s is %s", c.Name, c.Status)
		}
	}
	if len(checks) != 2 || names["build"] != 1 || names["test"] != 1 {
		t.Fatalf("check runs %v, want one of each job", names)
	}
}
