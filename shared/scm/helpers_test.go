package scm_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/scm"
	"github.com/forgeci/forgeci/shared/scm/fakegithub"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
)

const (
	repoID       = 1296269
	repoName     = "octo/hello"
	installID    = 77
	repoSecret   = "It's a Secret to Everybody"
	pipelineYAML = `jobs:
  build:
    steps:
      - run: ./build.sh
  test:
    needs: build
    steps:
      - run: "true"
`
)

type env struct {
	t      *testing.T
	dbURL  string
	pool   *pgxpool.Pool
	store  *store.Store
	casCfg cas.Config
	cas    *cas.Store
	gh     *fakegithub.GitHub
	srv    *httptest.Server // the webhook route
	api    *api.Server      // srv's server
	worker *scm.Worker
	log    *slog.Logger
	// project is the repository's project; admin a global admin.
	project store.Project
	admin   store.User
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dbURL: pgtest.NewDatabase(t), casCfg: castest.Config(t), gh: fakegithub.New(t),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var err error
	e.pool, err = store.OpenPool(context.Background(), e.dbURL, store.PoolOptions{MaxConns: 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	e.store = store.New(e.pool, store.Limits{LeaseTTL: 30 * time.Second})
	keys, err := secretbox.NewFileKeyring(filepath.Join(t.TempDir(), "master.key"), true)
	if err != nil {
		t.Fatal(err)
	}
	e.store.SetKeyring(keys)
	e.project, e.admin = pgtest.Project(t, e.store, "hello"), pgtest.Admin(t, e.store, "root")
	if e.cas, err = cas.New(context.Background(), e.casCfg); err != nil {
		t.Fatal(err)
	}
	if err := e.cas.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.store.AddRepository(context.Background(), store.Repository{GitHubID: repoID, FullName: repoName,
		InstallationID: installID, WebhookSecret: repoSecret, Project: "hello"}); err != nil {
		t.Fatal(err)
	}
	e.gh.AddRepository(repoID, repoName)
	e.store.SetObjects(e.cas)
	e.api = &api.Server{Store: e.store, CAS: e.cas, Log: e.log}
	e.srv = httptest.NewServer(e.api.Handler("webhook"))
	t.Cleanup(e.srv.Close)
	e.worker = e.newWorker()
	return e
}

func (e *env) newWorker() *scm.Worker { return e.workerAt(e.gh.URL()) }

// workerAt is a worker that reaches GitHub at base (a proxy in front of
// the fake, say).
func (e *env) workerAt(base string) *scm.Worker {
	app, err := scm.NewApp(e.gh.AppID, e.gh.PrivateKeyPEM(), base)
	if err != nil {
		e.t.Fatal(err)
	}
	return &scm.Worker{Store: e.store, CAS: e.cas, App: app, Log: e.log, PublicURL: "https://ci.example.com",
		Backoff: func(int) time.Duration { return 20 * time.Millisecond }, TempDir: e.t.TempDir()}
}

// gitRepo makes a checkout with a pipeline, an executable script and a
// symlink, commits it and returns the directory and commit SHA.
func gitRepo(t *testing.T, pipeline string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	if pipeline != "" {
		write(".forgeci.yml", pipeline, 0o644)
	}
	write("build.sh", "#!/bin/sh\necho built\n", 0o755)
	write("src/main.go", "package main\n\nfunc main() {}\n", 0o644)
	if err := os.Symlink("src/main.go", filepath.Join(dir, "main-link.go")); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")
	return dir, strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return string(out)
}

func sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// deliver posts a delivery the way GitHub does for a repository webhook.
func (e *env) deliver(event, guid string, body []byte, signature string) (int, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/webhooks/github", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", guid)
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", strconv.Itoa(repoID))
	if signature != "" {
		req.Header.Set("X-Hub-Signature-256", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func pushPayload(sha string) []byte {
	b, _ := json.Marshal(map[string]any{
		"ref": "refs/heads/main", "before": strings.Repeat("0", 40), "after": sha, "deleted": false,
		"pusher": map[string]any{"name": "octo"}, "sender": map[string]any{"id": 31, "login": "octo"},
		"repository": map[string]any{"id": repoID, "full_name": repoName, "name": "hello",
			"owner": map[string]any{"login": "octo"}},
		"installation": map[string]any{"id": installID},
	})
	return b
}

// pull makes the fake GitHub serve pull request number into the repository,
// from a fork (headRepoID other than repoID) or a branch, opened by user.
func (e *env) pull(number int, headRepoID, userID int64, sha string) {
	headName := repoName
	if headRepoID != repoID {
		headName = fmt.Sprintf("user%d/hello", userID)
	}
	e.gh.AddPullRequest(fakegithub.PullRequest{Number: number, BaseRepoID: repoID, BaseFullName: repoName, BaseRef: "main",
		HeadRepoID: headRepoID, HeadFullName: headName, HeadRef: "feature", HeadSHA: sha, UserID: userID,
		UserLogin: fmt.Sprintf("user%d", userID)})
}

func prPayload(sha string, number int, headRepoID int64) []byte {
	b, _ := json.Marshal(map[string]any{
		"action": "opened", "number": number,
		"pull_request": map[string]any{"number": number,
			"head": map[string]any{"sha": sha, "ref": "feature", "repo": map[string]any{"id": headRepoID}},
			"base": map[string]any{"sha": strings.Repeat("1", 40), "ref": "main", "repo": map[string]any{"id": repoID}}},
		"repository": map[string]any{"id": repoID, "full_name": repoName},
	})
	return b
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) runOnce() scm.Result {
	e.t.Helper()
	res, err := e.worker.RunOnce(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// onlyRun returns the one run of the test database.
func (e *env) onlyRun() store.Run {
	e.t.Helper()
	if n := e.count(`SELECT count(*) FROM runs`); n != 1 {
		e.t.Fatalf("%d runs, want exactly 1", n)
	}
	var id string
	if err := e.pool.QueryRow(context.Background(), `SELECT id FROM runs`).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	run, err := e.store.GetRun(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return run
}

// finishJobs plays a runner: it claims every queued job and completes it
// with exit code 0, except jobs named in failing.
func (e *env) finishJobs(failing ...string) {
	e.t.Helper()
	ctx := context.Background()
	reg, _, err := e.store.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	if err != nil {
		e.t.Fatal(err)
	}
	_, token, err := e.store.RegisterRunner(ctx, reg, fmt.Sprintf("r-%d", time.Now().UnixNano()), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	runner, err := e.store.AuthenticateRunner(ctx, token)
	if err != nil {
		e.t.Fatal(err)
	}
	for {
		c, err := e.store.Claim(ctx, runner, nil, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		if c == nil {
			return
		}
		var job struct{ Name string }
		_ = json.Unmarshal(c.Job, &job)
		code, outcome := 0, domain.OutcomePassed
		for _, f := range failing {
			if f == job.Name {
				code, outcome = 1, domain.OutcomeFailed
			}
		}
		if _, err := e.store.Complete(ctx, runner.ID, c.Lease.JobID, c.Lease, outcome, code); err != nil {
			e.t.Fatal(err)
		}
	}
}

// expireDeliveryLease ends delivery guid's lease as its expiry passing
// would. A delivery's lease is decided by the database's now() alone, so
// an expiry set in the past proves what waiting for it would, at once.
func (e *env) expireDeliveryLease(guid string) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), `
		UPDATE scm_deliveries SET lease_expires_at = now() - interval '1 second'
		WHERE guid = $1 AND lease_id IS NOT NULL`, guid); err != nil {
		e.t.Fatal(err)
	}
}

// reconcile runs passes until the outbox is empty (or fails the test).
func (e *env) reconcile() {
	e.t.Helper()
	for i := 0; i < 200; i++ {
		e.runOnce()
		if e.count(`SELECT count(*) FROM check_runs WHERE version > pushed_version`) == 0 {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	e.t.Fatal("check runs did not converge")
}
