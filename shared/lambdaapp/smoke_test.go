package lambdaapp_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/lambdaapp/lambdatest"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/snapshot/snapshottest"
)

// The bootstraps are built once per test binary, into buildDir.
var (
	buildDir   string
	buildOnce  sync.Once
	bootstraps map[string]string
	buildErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// rie returns the emulator binary. Without it the smoke tests skip, except
// in CI (CI set), where a missing emulator is a failure.
func rie(t *testing.T) string {
	t.Helper()
	bin, err := lambdatest.RIE()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and the Lambda smoke tests cannot run: %v", err)
		}
		t.Skipf("skipping the Lambda runtime smoke tests: %v", err)
	}
	return bin
}

// built returns every functions/<name> bootstrap (and the hello baseline).
func built(t *testing.T) map[string]string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := lambdatest.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		dirs, err := os.ReadDir(filepath.Join(root, "functions"))
		if err != nil {
			buildErr = err
			return
		}
		pkgs := []string{"./shared/lambdaapp/lambdatest/hello"}
		for _, d := range dirs {
			pkgs = append(pkgs, "./functions/"+d.Name())
		}
		if buildDir, buildErr = os.MkdirTemp("", "forgeci-bootstraps-"); buildErr != nil {
			return
		}
		bootstraps, buildErr = lambdatest.Build(context.Background(), buildDir, runtime.GOARCH, pkgs...)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bootstraps
}

// lambdaEnv is a function's environment in AWS (lambdatest.AWSEnv) and
// the stand-in Secrets Manager it reads its secrets from.
type lambdaEnv struct {
	vars []string
	sm   *lambdatest.SecretsManager
}

func newLambdaEnv(t *testing.T, dbURL string, blobs cas.Config) *lambdaEnv {
	t.Helper()
	vars, sm, err := lambdatest.AWSEnv(dbURL, blobs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sm.Close)
	return &lambdaEnv{vars: vars, sm: sm}
}

// fleet starts one emulator per function on first use, like Lambda starts
// a container, and records each function's cold and warm invoke times.
type fleet struct {
	t      *testing.T
	rie    string
	boots  map[string]string
	env    *lambdaEnv
	extra  map[string][]string // per-function environment
	emus   map[string]*lambdatest.Emulator
	timing map[string][]time.Duration
}

func newFleet(t *testing.T, env *lambdaEnv) *fleet {
	return &fleet{t: t, rie: rie(t), boots: built(t), env: env, extra: map[string][]string{},
		emus: map[string]*lambdatest.Emulator{}, timing: map[string][]time.Duration{}}
}

func (f *fleet) emulator(name string) *lambdatest.Emulator {
	f.t.Helper()
	if e, ok := f.emus[name]; ok {
		return e
	}
	boot, ok := f.boots[strings.SplitN(name, "#", 2)[0]]
	if !ok {
		f.t.Fatalf("no bootstrap for %s", name)
	}
	e, err := lambdatest.Start(context.Background(), f.rie, boot, append(append([]string{}, f.env.vars...), f.extra[name]...))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		if f.t.Failed() {
			f.t.Logf("%s emulator log:\n%s", name, e.Log())
		}
		e.Stop()
	})
	f.emus[name] = e
	return e
}

func (f *fleet) invoke(name string, event any) json.RawMessage {
	f.t.Helper()
	out, took, err := f.emulator(name).Invoke(context.Background(), event)
	if err != nil {
		f.t.Fatalf("%s: %v", name, err)
	}
	f.timing[name] = append(f.timing[name], took)
	return out
}

// response is an API Gateway HTTP API response with its body decoded.
type response struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response body %q: %v", r.Body, err)
	}
}

// errorCode returns error.code of an error envelope.
func (r response) errorCode() string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error.Code
}

var requestSeq int

// call sends an API Gateway HTTP API (payload v2) event for route
// ("POST /v1/runner/jobs/{job_id}/logs") with the path filled in.
func (f *fleet) call(name, route, path, token string, body any) response {
	f.t.Helper()
	raw := ""
	if body != nil {
		b, _ := json.Marshal(body)
		raw = string(b)
	}
	headers := map[string]string{"content-type": "application/json", "user-agent": "forgeci-smoke"}
	if token != "" {
		headers["authorization"] = "Bearer " + token
	}
	requestSeq++
	ev := lambdatest.HTTPRequest(fmt.Sprintf("smoke-%d", requestSeq), route, path, headers, raw)
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(f.invoke(name, ev), &resp); err != nil {
		f.t.Fatalf("%s %s: not an HTTP API response: %v", name, route, err)
	}
	out := []byte(resp.Body)
	if resp.IsBase64Encoded {
		var err error
		if out, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			f.t.Fatal(err)
		}
	}
	return response{Status: resp.StatusCode, Headers: resp.Headers, Body: out}
}

// webhook sends a GitHub App delivery of a ping event, signed when sig is set.
func (f *fleet) webhook(body []byte, sig string) response {
	f.t.Helper()
	headers := map[string]string{"content-type": "application/json", "user-agent": "GitHub-Hookshot/smoke",
		"x-github-event": "ping", "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"x-github-hook-installation-target-type": "integration", "x-github-hook-installation-target-id": "12345"}
	if sig != "" {
		headers["x-hub-signature-256"] = sig
	}
	ev := lambdatest.HTTPRequest("smoke-webhook", "POST /v1/webhooks/github", "/v1/webhooks/github", headers, string(body))
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(f.invoke("webhook", ev), &resp); err != nil {
		f.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Headers: resp.Headers, Body: []byte(resp.Body)}
}

func (f *fleet) expect(name, route, path, token string, body any, status int) response {
	f.t.Helper()
	r := f.call(name, route, path, token, body)
	if r.Status != status {
		f.t.Fatalf("%s %s: status %d, want %d; body %s", name, path, r.Status, status, r.Body)
	}
	return r
}

func (f *fleet) report() {
	names := make([]string, 0, len(f.timing))
	for n := range f.timing {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ts := f.timing[n]
		warm := time.Duration(0)
		for _, d := range ts[1:] {
			warm += d
		}
		if len(ts) > 1 {
			warm /= time.Duration(len(ts) - 1)
		}
		f.t.Logf("%-10s cold first invoke %7.1f ms, warm mean %6.2f ms over %d", n, ms(ts[0]), ms(warm), len(ts)-1)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type lease struct {
	RunID      string `json:"run_id"`
	JobID      string `json:"job_id"`
	RunnerID   string `json:"runner_id"`
	LeaseID    string `json:"lease_id"`
	Generation int    `json:"generation"`
}

type claimed struct {
	Lease lease `json:"lease"`
	Job   struct {
		Name string `json:"name"`
	} `json:"job"`
}

const smokePipeline = `jobs:
  build:
    runs-on: linux
    permissions: {id-token: write}
    steps:
      - run: echo build
    artifacts: [{name: dist, paths: [dist/]}]
    cache: {key: smoke-v1, paths: [.cache]}
  publish:
    runs-on: linux
    needs: build
    download: [{job: build, name: dist}]
    steps:
      - run: echo publish
`

// snapshotOf writes a snapshot of files and returns its bytes and digests.
func snapshotOf(t *testing.T, files map[string]string) ([]byte, *snapshot.Result) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return snapshottest.Of(t, dir)
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// put uploads to a presigned URL from an upload answer.
func put(t *testing.T, r response, data []byte) {
	t.Helper()
	var up struct {
		URL     string            `json:"upload_url"`
		Method  string            `json:"upload_method"`
		Headers map[string]string `json:"upload_headers"`
		Exists  bool              `json:"exists"`
	}
	r.json(t, &up)
	if up.Exists || up.URL == "" {
		t.Fatalf("expected an upload URL, got %s", r.Body)
	}
	req, err := http.NewRequest(up.Method, up.URL, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	req.ContentLength = int64(len(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("presigned upload: %d %s", resp.StatusCode, msg)
	}
}

// TestLambdaSmoke drives every HTTP route through its real bootstrap under
// the Lambda Runtime Interface Emulator, against real PostgreSQL and S3:
// a runner registers, a user submits a two-job pipeline, the runner claims,
// heartbeats, fetches the source, appends logs, saves an artifact and a
// cache entry and completes; the second job fetches the artifact. Stale
// leases are fenced (409) through the same path; the webhook refuses an
// unsigned delivery; the scheduled sweeper and scm functions run; the admin
// function makes the registration token and user, lists and revokes the
// runner; the database credentials come from (stand-in) Secrets Manager at
// cold start.
func TestLambdaSmoke(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	blobsCfg := castest.Config(t)
	blobs, err := cas.New(ctx, blobsCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := blobs.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	env := newLambdaEnv(t, dbURL, blobsCfg)
	f := newFleet(t, env)
	f.extra["oidc"] = oidcEnv(t)
	// A second claim container with a 5 s lease, for the sweeper.
	f.extra["claim#short"] = []string{"FORGECI_LEASE_TTL_SECONDS=5"}
	defer f.report()

	// The admin function makes the registration token and the user.
	admin := func(req map[string]any) map[string]any {
		t.Helper()
		var out map[string]any
		if err := json.Unmarshal(f.invoke("admin", req), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	regToken, _ := admin(map[string]any{"command": "registration-token", "ttl_hours": 1, "description": "smoke"})["registration_token"].(string)
	userToken, _ := admin(map[string]any{"command": "create-user", "name": "smoke", "role": "admin"})["token"].(string)
	if regToken == "" || userToken == "" {
		t.Fatal("the admin function made no registration token or user token")
	}

	// Registration: a wrong token is 401, the right one gives a runner.
	if r := f.expect("register", "POST /v1/runners/register", "/v1/runners/register", "",
		map[string]any{"registration_token": "frg_wrong", "name": "r", "labels": []string{"linux"}}, 401); r.errorCode() != "unauthorized" {
		t.Fatalf("wrong registration token: %s", r.Body)
	}
	var runner struct {
		RunnerID string `json:"runner_id"`
		Token    string `json:"token"`
	}
	f.expect("register", "POST /v1/runners/register", "/v1/runners/register", "",
		map[string]any{"registration_token": regToken, "name": "smoke-runner", "labels": []string{"linux"}}, 201).json(t, &runner)

	// Submit: a project, a presigned source upload, then the run.
	f.expect("api", "POST /v1/projects", "/v1/projects", userToken, map[string]any{"name": "smoke"}, 201)
	src, res := snapshotOf(t, map[string]string{".forgeci.yml": smokePipeline, "README": "smoke\n"})
	put(t, f.expect("api", "POST /v1/uploads", "/v1/uploads", userToken,
		map[string]any{"project": "smoke", "digest": res.BlobDigest, "size": res.Size}, 200), src)
	source := map[string]any{"blob_digest": res.BlobDigest, "manifest_digest": res.ManifestDigest, "size": res.Size}
	var run struct {
		ID   string `json:"id"`
		Jobs []struct {
			ID    string `json:"id"`
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"jobs"`
	}
	f.expect("api", "POST /v1/runs", "/v1/runs", userToken, map[string]any{"project": "smoke", "source": source}, 201).json(t, &run)
	if len(run.Jobs) != 2 {
		t.Fatalf("run: %+v", run)
	}
	f.expect("api", "GET /v1/runs/{run_id}", "/v1/runs/"+run.ID, "", nil, 401)

	// Claim the first job.
	claim := func(fn string) claimed {
		t.Helper()
		var c claimed
		f.expect(fn, "POST /v1/runner/claim", "/v1/runner/claim", runner.Token,
			map[string]any{"labels": []string{"linux"}, "wait_seconds": 0, "features": []string{"id-token"}}, 200).json(t, &c)
		return c
	}
	c := claim("claim")
	if c.Job.Name != "build" || c.Lease.Generation != 1 {
		t.Fatalf("claimed %+v", c)
	}
	jobPath := "/v1/runner/jobs/" + c.Lease.JobID
	stale := c.Lease
	stale.Generation++

	// Heartbeat, and the fencing rejection through the real Lambda path.
	f.expect("heartbeat", "POST /v1/runner/jobs/{job_id}/heartbeat", jobPath+"/heartbeat", runner.Token, map[string]any{"lease": c.Lease}, 200)
	if r := f.expect("heartbeat", "POST /v1/runner/jobs/{job_id}/heartbeat", jobPath+"/heartbeat", runner.Token,
		map[string]any{"lease": stale}, 409); r.errorCode() != "lease_mismatch" {
		t.Fatalf("stale heartbeat: %s", r.Body)
	}
	f.expect("heartbeat", "POST /v1/runner/jobs/{job_id}/heartbeat", jobPath+"/heartbeat", "", map[string]any{"lease": c.Lease}, 401)
	smokeIDToken(t, f, runner.Token, jobPath, c.Lease, stale)

	// Source: a presigned GET of exactly the uploaded bytes.
	var srcAns struct {
		URL string `json:"url"`
	}
	f.expect("source", "POST /v1/runner/jobs/{job_id}/source", jobPath+"/source", runner.Token, map[string]any{"lease": c.Lease}, 200).json(t, &srcAns)
	if got := castest.Download(t, srcAns.URL); !bytes.Equal(got, src) {
		t.Fatal("the presigned source URL does not serve the uploaded snapshot")
	}
	f.expect("source", "POST /v1/runner/jobs/{job_id}/source", jobPath+"/source", runner.Token, map[string]any{"lease": stale}, 409)

	// Logs: append, idempotent resend, wrong offset, stale lease.
	logLine := base64.StdEncoding.EncodeToString([]byte("hello from lambda\n"))
	logs := func(l lease, offset int, data string, status int) response {
		return f.expect("logs", "POST /v1/runner/jobs/{job_id}/logs", jobPath+"/logs", runner.Token,
			map[string]any{"lease": l, "offset": offset, "data": data}, status)
	}
	logs(c.Lease, 0, logLine, 200)
	logs(c.Lease, 0, logLine, 200)
	logs(c.Lease, 5, logLine, 416)
	logs(stale, 18, logLine, 409)
	r := f.expect("api", "GET /v1/runs/{run_id}/jobs/{job_id}/logs", "/v1/runs/"+run.ID+"/jobs/"+c.Lease.JobID+"/logs", userToken, nil, 200)
	if string(r.Body) != "hello from lambda\n" {
		t.Fatalf("log read back %q", r.Body)
	}

	// Artifact: presigned upload, verified commit; stale commit fenced.
	artifact := []byte("dist contents\n")
	art := map[string]any{"lease": c.Lease, "name": "dist", "digest": digestOf(artifact), "size": len(artifact)}
	put(t, f.expect("artifacts", "POST /v1/runner/jobs/{job_id}/artifacts", jobPath+"/artifacts", runner.Token, art, 200), artifact)
	art["lease"] = stale
	f.expect("artifacts", "POST /v1/runner/jobs/{job_id}/artifacts/commit", jobPath+"/artifacts/commit", runner.Token, art, 409)
	art["lease"] = c.Lease
	f.expect("artifacts", "POST /v1/runner/jobs/{job_id}/artifacts/commit", jobPath+"/artifacts/commit", runner.Token, art, 201)

	// Cache: miss, save, commit.
	f.expect("cache", "POST /v1/runner/jobs/{job_id}/cache/restore", jobPath+"/cache/restore", runner.Token,
		map[string]any{"lease": c.Lease, "keys": []string{"smoke-v1"}}, 204)
	cacheBlob := []byte("cache contents\n")
	entry := map[string]any{"lease": c.Lease, "key": "smoke-v1", "digest": digestOf(cacheBlob), "size": len(cacheBlob)}
	put(t, f.expect("cache", "POST /v1/runner/jobs/{job_id}/cache/save", jobPath+"/cache/save", runner.Token, entry, 200), cacheBlob)
	f.expect("cache", "POST /v1/runner/jobs/{job_id}/cache/commit", jobPath+"/cache/commit", runner.Token, entry, 201)

	// Complete: a stale completion is fenced and changes nothing.
	done := map[string]any{"lease": stale, "outcome": "passed", "exit_code": 0}
	f.expect("complete", "POST /v1/runner/jobs/{job_id}/complete", jobPath+"/complete", runner.Token, done, 409)
	done["lease"] = c.Lease
	var state struct {
		State string `json:"state"`
	}
	f.expect("complete", "POST /v1/runner/jobs/{job_id}/complete", jobPath+"/complete", runner.Token, done, 200).json(t, &state)
	if state.State != "PASSED" {
		t.Fatalf("complete: %+v", state)
	}
	if r := f.expect("heartbeat", "POST /v1/runner/jobs/{job_id}/heartbeat", jobPath+"/heartbeat", runner.Token,
		map[string]any{"lease": c.Lease}, 409); r.errorCode() != "job_finished" {
		t.Fatalf("heartbeat after completion: %s", r.Body)
	}

	// The second job fetches the first one's artifact, and restores its cache.
	c2 := claim("claim")
	if c2.Job.Name != "publish" {
		t.Fatalf("second claim %+v", c2)
	}
	job2 := "/v1/runner/jobs/" + c2.Lease.JobID
	var fetched struct {
		URL    string `json:"url"`
		Digest string `json:"digest"`
	}
	f.expect("artifacts", "POST /v1/runner/jobs/{job_id}/artifacts/fetch", job2+"/artifacts/fetch", runner.Token,
		map[string]any{"lease": c2.Lease, "job": "build", "name": "dist"}, 200).json(t, &fetched)
	if got := castest.Download(t, fetched.URL); !bytes.Equal(got, artifact) {
		t.Fatal("fetched artifact differs")
	}
	var hit struct {
		URL string `json:"url"`
	}
	f.expect("cache", "POST /v1/runner/jobs/{job_id}/cache/restore", job2+"/cache/restore", runner.Token,
		map[string]any{"lease": c2.Lease, "keys": []string{"smoke-"}}, 200).json(t, &hit)
	if got := castest.Download(t, hit.URL); !bytes.Equal(got, cacheBlob) {
		t.Fatal("restored cache differs")
	}
	f.expect("complete", "POST /v1/runner/jobs/{job_id}/complete", job2+"/complete", runner.Token,
		map[string]any{"lease": c2.Lease, "outcome": "failed", "exit_code": 3}, 200)
	var view struct {
		State string `json:"state"`
	}
	f.expect("api", "GET /v1/runs/{run_id}", "/v1/runs/"+run.ID, userToken, nil, 200).json(t, &view)
	if view.State != "FAILED" {
		t.Fatalf("run state %s, want FAILED", view.State)
	}

	// Cancel: a job, then the rest of a second run.
	var run2 struct {
		ID   string `json:"id"`
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	f.expect("api", "POST /v1/runs", "/v1/runs", userToken, map[string]any{"project": "smoke", "source": source}, 201).json(t, &run2)
	f.expect("api", "POST /v1/runs/{run_id}/jobs/{job_id}/cancel", "/v1/runs/"+run2.ID+"/jobs/"+run2.Jobs[1].ID+"/cancel", userToken, nil, 202)
	f.expect("api", "POST /v1/runs/{run_id}/cancel", "/v1/runs/"+run2.ID+"/cancel", userToken, nil, 202)

	// The sweeper ends an expired lease: claim with a 5 s lease, let it
	// lapse, invoke the scheduled function until the job is ABORTED.
	var run3 struct {
		ID string `json:"id"`
	}
	f.expect("api", "POST /v1/runs", "/v1/runs", userToken, map[string]any{"project": "smoke", "source": source}, 201).json(t, &run3)
	c3 := claim("claim#short")
	scheduled := lambdatest.Scheduled("smoke")
	deadline := time.Now().Add(30 * time.Second)
	for {
		f.invoke("sweeper", scheduled)
		f.expect("api", "GET /v1/runs/{run_id}", "/v1/runs/"+run3.ID, userToken, nil, 200).json(t, &view)
		if view.State == "ABORTED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s 30 s after its 5 s lease", run3.ID, view.State)
		}
		time.Sleep(time.Second)
	}
	f.expect("heartbeat", "POST /v1/runner/jobs/{job_id}/heartbeat", "/v1/runner/jobs/"+c3.Lease.JobID+"/heartbeat", runner.Token,
		map[string]any{"lease": c3.Lease}, 409)

	// GitHub: an unsigned delivery is refused; one signed with the App's
	// webhook secret (read from Secrets Manager) is accepted, and a ping is
	// ignored; the scm worker makes its scheduled passes (nothing of GitHub's
	// to do).
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
	if r = f.webhook(ping, ""); r.Status != 401 || r.errorCode() != "unauthorized" {
		t.Fatalf("unsigned webhook: %d %s", r.Status, r.Body)
	}
	mac := hmac.New(sha256.New, []byte(lambdatest.WebhookSecret))
	mac.Write(ping)
	if r = f.webhook(ping, "sha256="+hex.EncodeToString(mac.Sum(nil))); r.Status != 202 || !strings.Contains(string(r.Body), "ignored") {
		t.Fatalf("signed ping: %d %s", r.Status, r.Body)
	}
	f.invoke("scm", scheduled)
	f.invoke("scm", scheduled)

	// Revocation: the runner is listed, revoked, and then refused.
	if rs, _ := admin(map[string]any{"command": "list-runners"})["runners"].([]any); len(rs) != 1 || rs[0].(map[string]any)["id"] != runner.RunnerID {
		t.Fatalf("list-runners: %v", rs)
	}
	admin(map[string]any{"command": "revoke-runner", "runner_id": runner.RunnerID})
	f.expect("claim", "POST /v1/runner/claim", "/v1/runner/claim", runner.Token, map[string]any{"labels": []string{"linux"}}, 401)
	if _, _, err := f.emulator("admin").Invoke(ctx, map[string]any{"command": "drop-everything"}); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown admin command: %v", err)
	}

	// Secrets are read once per container, at cold start, never per request.
	if got, want := env.sm.Reads(lambdatest.DatabaseSecretARN), len(f.emus); got != want {
		t.Errorf("database secret read %d times by %d containers", got, want)
	}
}

// TestLambdaMigrations runs the migrate bootstrap as CloudFormation runs
// it: a custom resource Create on an empty database applies the
// migrations and answers SUCCESS at the presigned response URL; Update
// applies nothing more; Delete leaves the database alone; unreadable
// credentials answer FAILED instead of leaving CloudFormation waiting.
func TestLambdaMigrations(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, nil)
	db := pgtest.EmptyDatabase(t, "migrate_smoke_"+fmt.Sprint(time.Now().UnixNano()))
	f.env = newLambdaEnv(t, db, cas.Config{Bucket: "unused"})

	answers := make(chan map[string]any, 4)
	cfn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		if r.Method != http.MethodPut {
			a = map[string]any{"Status": "wrong method " + r.Method}
		}
		answers <- a
	}))
	defer cfn.Close()
	event := func(kind, physical string) map[string]any {
		return map[string]any{"RequestType": kind, "RequestId": "req-" + kind, "ResponseURL": cfn.URL + "/response?sig=x",
			"ResourceType": "Custom::Migrations", "LogicalResourceId": "Migrations", "PhysicalResourceId": physical,
			"StackId":            "arn:aws:cloudformation:us-east-1:123456789012:stack/forgeci/1",
			"ResourceProperties": map[string]any{"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:migrate", "CodeVersion": "3"}}
	}
	answer := func(fn string, ev map[string]any) map[string]any {
		t.Helper()
		f.invoke(fn, ev)
		select {
		case a := <-answers:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("the custom resource did not answer CloudFormation")
			return nil
		}
	}
	tables := func() int {
		var n int
		c, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	a := answer("migrate", event("Create", ""))
	if a["Status"] != "SUCCESS" || a["PhysicalResourceId"] != "forgeci-migrations" || a["RequestId"] != "req-Create" {
		t.Fatalf("Create answered %v", a)
	}
	if n := fmt.Sprint(a["Data"].(map[string]any)["Applied"]); n == "0" {
		t.Fatalf("Create applied no migration: %v", a)
	}
	if tables() == 0 {
		t.Fatal("no tables after the migrations ran")
	}
	if a := answer("migrate", event("Update", "forgeci-migrations")); a["Status"] != "SUCCESS" || fmt.Sprint(a["Data"].(map[string]any)["Applied"]) != "0" {
		t.Fatalf("Update answered %v", a)
	}
	before := tables()
	if a := answer("migrate", event("Delete", "forgeci-migrations")); a["Status"] != "SUCCESS" || tables() != before {
		t.Fatalf("Delete answered %v, or changed the database", a)
	}
	// A container whose first event is a Delete answers at once, without
	// waiting for the connection its cold start began.
	if a := answer("migrate#delete", event("Delete", "forgeci-migrations")); a["Status"] != "SUCCESS" || tables() != before {
		t.Fatalf("Delete in a fresh container answered %v, or changed the database", a)
	}
	// A container whose credentials secret does not exist.
	f.extra["migrate#nosecret"] = []string{"FORGECI_DATABASE_CREDENTIALS_SECRET_ARN=arn:aws:secretsmanager:us-east-1:123456789012:secret:missing"}
	if a := answer("migrate#nosecret", event("Create", "")); a["Status"] != "FAILED" || !strings.Contains(fmt.Sprint(a["Reason"]), "ResourceNotFoundException") {
		t.Fatalf("missing secret answered %v", a)
	}
}
