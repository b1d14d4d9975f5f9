package scm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/scm"
	"github.com/forgeci/forgeci/shared/store"
)

const childEnv = "FORGECI_SCM_TEST_CHILD"

type childConfig struct {
	DB, GitHubURL string
	Key           []byte
	AppID         int64
	CAS           cas.Config
	Lease         time.Duration
}

// runChild is a worker in its own process, for the test to kill.
func runChild() int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	pool, err := store.OpenPool(ctx, cfg.DB, store.PoolOptions{MaxConns: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	blobs, err := cas.New(ctx, cfg.CAS)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	app, err := scm.NewApp(cfg.AppID, cfg.Key, cfg.GitHubURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w := &scm.Worker{Store: store.New(pool, store.Limits{}), CAS: blobs, App: app, DeliveryLease: cfg.Lease,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := w.RunOnce(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestWorkerKilledMidDelivery: a worker process SIGKILLed while it fetches
// the source leaves its delivery leased; nothing happens until the lease
// expires (the test ends it in the database rather than wait), then
// another worker reclaims it and makes exactly one run.
func TestWorkerKilledMidDelivery(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	fetching := make(chan struct{})
	release := make(chan struct{})
	var started atomic.Bool
	e.gh.BeforeTarball = func() {
		// The first download hangs until the test has killed its worker.
		if started.CompareAndSwap(false, true) {
			close(fetching)
			<-release
		}
	}
	defer close(release)
	body := pushPayload(sha)
	e.deliver("push", "guid-kill", body, sign(repoSecret, body))

	cfg, _ := json.Marshal(childConfig{DB: e.dbURL, GitHubURL: e.gh.URL(), Key: e.gh.PrivateKeyPEM(),
		AppID: e.gh.AppID, CAS: e.casCfg, Lease: 2 * time.Second})
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+string(cfg))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fetching:
	case <-time.After(30 * time.Second):
		_ = child.Process.Kill()
		t.Fatal("the child worker never fetched the source")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	if res := e.runOnce(); res.Runs != 0 {
		t.Fatalf("the dead worker's delivery was taken before its lease expired: %+v", res)
	}
	e.expireDeliveryLease("guid-kill")
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("the delivery was not reclaimed once its lease expired: %+v", res)
	}
	run := e.onlyRun()
	var state string
	var attempts int
	if err := e.pool.QueryRow(context.Background(), `SELECT state, attempts FROM scm_deliveries WHERE guid = 'guid-kill'`).Scan(&state, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != "DONE" || attempts != 2 {
		t.Fatalf("delivery %s after %d attempts, want DONE after 2", state, attempts)
	}
	if n := e.count(`SELECT count(*) FROM check_runs WHERE job_id IN (SELECT id FROM jobs WHERE run_id = $1)`, run.ID); n != 2 {
		t.Fatalf("%d outbox rows, want 2", n)
	}
}

// TestLostCreateResponses: GitHub applies every first create but the
// responses are lost. The reconciler finds the check runs by external_id
// instead of creating duplicates: exactly one check run per job, with the
// right final conclusions.
func TestLostCreateResponses(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-lost", body, sign(repoSecret, body))
	e.gh.DropResponses("POST /repos/{owner}/{repo}/check-runs", 2)
	if res := e.runOnce(); res.Runs != 1 || res.CheckErrors != 2 {
		t.Fatalf("first pass: %+v, want a run and two lost creates", res)
	}
	if n := len(e.gh.CheckRuns(repoName)); n != 2 {
		t.Fatalf("GitHub has %d check runs after the lost creates, want 2", n)
	}
	e.reconcile()
	e.finishJobs()
	e.reconcile()
	checks := e.gh.CheckRuns(repoName)
	if len(checks) != 2 {
		t.Fatalf("%d check runs, want exactly one per job: %+v", len(checks), checks)
	}
	for _, c := range checks {
		if c.Status != "completed" || c.Conclusion != "success" {
			t.Fatalf("check run %s is %s/%s", c.Name, c.Status, c.Conclusion)
		}
	}
	if n := e.gh.CountCalls("POST", "/repos/octo/hello/check-runs"); n != 2 {
		t.Fatalf("%d creates sent, want 2", n)
	}
	if n := e.gh.CountCalls("GET", "/repos/octo/hello/commits/"+sha+"/check-runs"); n != 2 {
		t.Fatalf("%d look-ups, want 2 (one per lost create)", n)
	}
	var ids []int64
	for _, st := range mustChecks(t, e) {
		ids = append(ids, st.GitHubID)
	}
	if ids[0] == 0 || ids[1] == 0 || ids[0] == ids[1] {
		t.Fatalf("recorded check run IDs %v", ids)
	}
}

func mustChecks(t *testing.T, e *env) []store.CheckStatus {
	t.Helper()
	run := e.onlyRun()
	st, err := e.store.ChecksOfRun(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGitHubDownConverges: with GitHub's API down the delivery and the
// check pushes fail and back off; jobs go on meanwhile; once GitHub is back
// every check run converges to its job's final state.
func TestGitHubDownConverges(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-down", body, sign(repoSecret, body))
	e.gh.SetDown(true)
	// A backoff longer than a pass (the shared 20 ms could end within one
	// that pushes checks between deliveries, on a busy machine).
	e.worker.Backoff = func(int) time.Duration { return 300 * time.Millisecond }
	if res := e.runOnce(); res.Retried != 1 || res.Runs != 0 {
		t.Fatalf("pass while down: %+v", res)
	}
	e.gh.SetDown(false)
	for i := 0; e.count(`SELECT count(*) FROM runs`) == 0; i++ {
		if i > 100 {
			t.Fatal("no run once GitHub was back")
		}
		time.Sleep(25 * time.Millisecond)
		e.runOnce()
	}
	e.reconcile()
	// Down again while the jobs run and finish.
	e.gh.SetDown(true)
	e.finishJobs("build")
	for i := 0; i < 3; i++ {
		if res := e.runOnce(); res.ChecksPushed != 0 {
			t.Fatalf("pushed while down: %+v", res)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if n := e.count(`SELECT count(*) FROM check_runs WHERE last_error LIKE '%503%'`); n == 0 {
		t.Fatal("the outbox does not show GitHub's errors")
	}
	e.gh.SetDown(false)
	e.reconcile()
	got := map[string]string{}
	for _, c := range e.gh.CheckRuns(repoName) {
		got[c.Name] = c.Status + "/" + c.Conclusion
	}
	// build failed, so test was skipped.
	if len(got) != 2 || got["build"] != "completed/failure" || got["test"] != "completed/skipped" {
		t.Fatalf("after GitHub came back: %v", got)
	}
	if n := e.gh.CountCalls("POST", "/repos/octo/hello/check-runs"); n != 2 {
		t.Fatalf("%d check runs created, want 2", n)
	}
}
