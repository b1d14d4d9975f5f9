package scm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
	_ "github.com/forgeci/forgeci/shared/ui" // the dashboard's routes
)

const maskSecret = "Zq8-hunter2-Xw7"

// TestSecretsMaskedWhereShown: a trusted push run's deploy job gets a
// secret, and its runner misbehaves: it appends the secret in clear, split
// across two appends, and puts it in its reason for failing. The API's log
// route, the dashboard's log feed, job and run pages, the run view and
// the GitHub check run show *** and never the secret, at any offset; the
// stored bytes are what the runner sent. While the job runs, the half
// secret is held back. A cold container that cannot open the secrets
// answers 503 rather than show the log unmasked.
func TestSecretsMaskedWhereShown(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if err := e.store.SetSecret(ctx, e.admin, e.project.ID, "DEPLOY_TOKEN", maskSecret); err != nil {
		t.Fatal(err)
	}
	dir, sha := gitRepo(t, "jobs:\n  deploy:\n    secrets: [DEPLOY_TOKEN]\n    steps:\n      - run: ./build.sh\n")
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	if code, out := e.deliver("push", "guid-mask", body, sign(repoSecret, body)); code != http.StatusAccepted {
		t.Fatalf("deliver: %d %v", code, out)
	}
	e.runOnce()
	run := e.onlyRun()
	e.reconcile()
	srv := httptest.NewServer((&api.Server{Store: e.store, CAS: e.cas, Log: e.log}).Handler())
	defer srv.Close()
	viewer := e.reader("viewer")
	session := pgtest.SessionCookie(t, e.store, viewer)
	runnerToken := e.runnerToken()
	claim := call[protocol.Claim](t, srv.URL+"/v1/runner/claim", runnerToken, map[string]any{"wait_seconds": 0})
	if claim.Secrets["DEPLOY_TOKEN"] != maskSecret {
		t.Fatalf("claim secrets %v", claim.Secrets)
	}
	l := claim.Lease
	logPath := "/v1/runs/" + run.ID + "/jobs/" + l.JobID + "/logs"
	first, second := "token="+maskSecret[:6], maskSecret[6:]+"\n"
	call[map[string]any](t, srv.URL+"/v1/runner/jobs/"+l.JobID+"/logs", runnerToken,
		map[string]any{"lease": l, "offset": 0, "data": []byte(first)})
	if code, text, next := get(t, srv.URL+logPath, viewer, session); code != 200 || text != "token=" || next != "6" {
		t.Fatalf("while running, half the secret stored: %d %q next %s", code, text, next)
	}
	call[map[string]any](t, srv.URL+"/v1/runner/jobs/"+l.JobID+"/logs", runnerToken,
		map[string]any{"lease": l, "offset": len(first), "data": []byte(second)})
	call[map[string]any](t, srv.URL+"/v1/runner/jobs/"+l.JobID+"/complete", runnerToken,
		map[string]any{"lease": l, "outcome": "failed", "exit_code": 1, "reason": "deploy printed " + maskSecret})

	raw := first + second
	if stored, _, err := e.store.ReadLog(ctx, run.ID, l.JobID, 0, 0, 1<<20); err != nil || string(stored) != raw {
		t.Fatalf("stored bytes: %q %v", stored, err)
	}
	for _, path := range []string{logPath, "/runs/" + run.ID + "/jobs/" + l.JobID + "/log"} {
		code, text, next := get(t, srv.URL+path+"?offset=0", viewer, session)
		if code != 200 || text != "token=***\n" || next != strconv.Itoa(len(raw)) {
			t.Fatalf("%s: %d %q next %s", path, code, text, next)
		}
		for off := range len(raw) {
			if _, text, _ := get(t, srv.URL+path+"?offset="+strconv.Itoa(off), viewer, session); leaks(text) {
				t.Fatalf("%s from offset %d: %q", path, off, text)
			}
		}
	}
	// The runner's reason is masked before it is stored.
	for path, want := range map[string]string{"/v1/runs/" + run.ID: "deploy printed ***", "/runs/" + run.ID: run.ID,
		"/runs/" + run.ID + "/jobs/" + l.JobID: "deploy printed ***"} {
		if code, text, _ := get(t, srv.URL+path, viewer, session); code != 200 || leaks(text) || !strings.Contains(text, want) {
			t.Fatalf("%s: %d\n%s", path, code, text)
		}
	}
	e.reconcile()
	checks := e.gh.CheckRuns(repoName)
	if len(checks) != 1 || checks[0].Conclusion != "failure" || !strings.Contains(checks[0].Output.Summary, "deploy printed ***") ||
		leaks(checks[0].Output.Summary+checks[0].Output.Title) {
		t.Fatalf("check runs: %+v", checks)
	}

	// A cold container that cannot open the project's data key.
	cold := store.New(e.pool, store.Limits{})
	cold.SetKeyring(brokenKeyring{})
	down := httptest.NewServer((&api.Server{Store: cold, CAS: e.cas, Log: e.log}).Handler())
	defer down.Close()
	for _, path := range []string{logPath, "/runs/" + run.ID + "/jobs/" + l.JobID + "/log"} {
		if code, text, _ := get(t, down.URL+path, viewer, session); code != http.StatusServiceUnavailable || leaks(text) {
			t.Fatalf("%s with the secrets unavailable: %d %q", path, code, text)
		}
	}
}

// leaks says whether text shows any 4 bytes of the secret.
func leaks(text string) bool {
	for i := 0; i+4 <= len(maskSecret); i++ {
		if strings.Contains(text, maskSecret[i:i+4]) {
			return true
		}
	}
	return false
}

// reader makes a user who may read the project.
func (e *env) reader(name string) string {
	e.t.Helper()
	u, token, err := e.store.CreateUser(context.Background(), name, store.RoleUser)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO project_members (project_id, user_id, role) VALUES ($1, $2, 'read')`,
		e.project.ID, u.ID); err != nil {
		e.t.Fatal(err)
	}
	return token
}

func (e *env) runnerToken() string {
	e.t.Helper()
	reg, _, err := e.store.CreateRegistrationToken(context.Background(), time.Minute, "", store.Scope{})
	if err != nil {
		e.t.Fatal(err)
	}
	_, token, err := e.store.RegisterRunner(context.Background(), reg, "misbehaving", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return token
}

// call POSTs a runner request and decodes a 200 answer.
func call[T any](t *testing.T, url, token string, body any) T {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out T
	if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	return out
}

// get GETs a page or log as a user (API bearer token and dashboard
// cookie both): status, body and X-Next-Offset.
func get(t *testing.T, url, token string, session *http.Cookie) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.AddCookie(session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Next-Offset")
}

// brokenKeyring is a master key that cannot be reached (KMS down).
type brokenKeyring struct{}

func (brokenKeyring) GenerateDataKey(context.Context) ([]byte, []byte, error) {
	return nil, nil, errors.New("kms unreachable")
}
func (brokenKeyring) Decrypt(context.Context, []byte) ([]byte, error) {
	return nil, errors.New("kms unreachable")
}
func (brokenKeyring) ID() string { return "broken" }

var _ secretbox.Keyring = brokenKeyring{}
