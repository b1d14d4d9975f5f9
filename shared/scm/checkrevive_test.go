package scm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// TestRefusedChecksComeBack: a check run given up while GitHub refused
// the repository (404: the App uninstalled) is pushed again once GitHub
// takes a push for that repository, at once; one GitHub refuses
// on its own (its commit gone) costs one push more, not one per later
// push of the others.
func TestRefusedChecksComeBack(t *testing.T) {
	e := setup(t)
	refuse := &refusals{pushes: map[string]int{}}
	w := e.workerAt(refuse.proxy(t, e.gh.URL()) + "/")
	w.MaxCheckAttempts = 3
	deliverNotice := func(guid, pipeline string) string {
		dir, sha := gitRepo(t, pipeline)
		e.gh.AddGitCommit(t, repoName, dir, sha)
		body := pushPayload(sha)
		e.deliver("push", guid, body, sign(repoSecret, body))
		return guid
	}
	settle := func() {
		t.Helper()
		for i := 0; e.count(`SELECT (SELECT count(*) FROM check_runs WHERE version > pushed_version) +
			(SELECT count(*) FROM scm_deliveries WHERE state = 'PENDING')`) > 0; i++ {
			if i == 100 {
				t.Fatalf("check runs still due after 100 passes (pushes %v)", refuse.counts())
			}
			if _, err := w.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	refuse.all(true)
	first := deliverNotice("first", "") // no pipeline: a notice
	settle()
	if n := e.count(`SELECT count(*) FROM check_runs WHERE last_error LIKE 'given up%'`); n != 1 || refuse.count(first) != 3 {
		t.Fatalf("%d given up after %d pushes, want 1 after 3", n, refuse.count(first))
	}

	refuse.all(false)
	second := deliverNotice("second", "jobs: [\n") // a broken pipeline: a notice
	settle()
	if refuse.count(second) != 1 || refuse.count(first) != 4 {
		t.Fatalf("pushes %v: the given-up check run was not pushed again with the next", refuse.counts())
	}
	if n := e.count(`SELECT count(*) FROM check_runs WHERE version = pushed_version AND last_error IS NULL`); n != 2 {
		t.Fatalf("%d of 2 check runs pushed", n)
	}
	if got := len(e.gh.CheckRuns(repoName)); got != 2 {
		t.Fatalf("GitHub shows %d check runs, want 2", got)
	}

	// One refused on its own is revived once, then given up for good.
	if _, err := e.pool.Exec(context.Background(), `UPDATE check_runs SET version = version + 1, next_attempt_at = now() WHERE delivery_guid = $1`, first); err != nil {
		t.Fatal(err)
	}
	refuse.one(first)
	settle()
	third := deliverNotice("third", "jobs: [\n\n")
	settle()
	fourth := deliverNotice("fourth", "jobs: [\n\n\n")
	settle()
	if refuse.count(third) != 1 || refuse.count(fourth) != 1 || refuse.count(first) != 4+3+1 {
		t.Fatalf("pushes %v: want the refused one's 3 and one more", refuse.counts())
	}
}

// refusals answers 404 to the check run pushes (creates and updates) of
// the delivery it refuses (or all), counting every push by delivery, and
// passes the rest on.
type refusals struct {
	mu        sync.Mutex
	refuseAll bool
	refused   string
	pushes    map[string]int
}

func (r *refusals) all(on bool)  { r.mu.Lock(); r.refuseAll, r.refused = on, ""; r.mu.Unlock() }
func (r *refusals) one(s string) { r.mu.Lock(); r.refuseAll, r.refused = false, s; r.mu.Unlock() }
func (r *refusals) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pushes[s]
}
func (r *refusals) counts() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.pushes)
}

func (r *refusals) proxy(t *testing.T, to string) string {
	target, _ := url.Parse(to)
	forward := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if (req.Method == http.MethodPost || req.Method == http.MethodPatch) && strings.Contains(req.URL.Path, "/check-runs") {
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			var cr struct {
				ExternalID string `json:"external_id"`
			}
			_ = json.Unmarshal(body, &cr)
			guid := strings.TrimPrefix(cr.ExternalID, "delivery:")
			r.mu.Lock()
			r.pushes[guid]++
			refused := r.refuseAll || guid == r.refused
			r.mu.Unlock()
			if refused {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"message":"Not Found"}`)
				return
			}
		}
		forward.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
