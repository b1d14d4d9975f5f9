package scm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/scm/fakegithub"
	"github.com/forgeci/forgeci/shared/store"
)

const (
	victimID     = 4242001
	victimName   = "victim/prod"
	victimSecret = "the victim's own webhook secret"
	appSecret    = "the GitHub App's webhook secret"
)

// post sends body to the webhook route of srv as GitHub would, with the
// given target headers.
func post(t *testing.T, srv *httptest.Server, event, guid, targetType string, targetID int64, body []byte, sig string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/webhooks/github", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", guid)
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", targetType)
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", strconv.FormatInt(targetID, 10))
	req.Header.Set("X-Hub-Signature-256", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWebhookBinding: a signature says who sent a body, not what it is
// about. A delivery signed with repository A's secret but naming repository
// B (the attack: a same-repository-looking pull request into B, to get B's
// secrets) is 401 and stores nothing, as is an App delivery whose
// installation is not the one registered for its repository, or a body
// whose JSON keys were reordered after signing. GitHub's published vector
// still verifies, and correctly bound deliveries are recorded.
func TestWebhookBinding(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	pgtestProject(t, e, "victim")
	if err := e.store.AddRepository(ctx, store.Repository{GitHubID: victimID, FullName: victimName, InstallationID: 99,
		WebhookSecret: victimSecret, Project: "victim"}); err != nil {
		t.Fatal(err)
	}
	e.gh.AddRepository(victimID, victimName)
	app := httptest.NewServer((&api.Server{Store: e.store, CAS: e.cas, Log: e.log, WebhookSecret: []byte(appSecret)}).Handler("webhook"))
	defer app.Close()

	// GitHub's test vector: secret "It's a Secret to Everybody", body
	// "Hello, World!" (docs: Validating webhook deliveries).
	const vector = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if code := post(t, e.srv, "ping", "g-vector", "repository", repoID, []byte("Hello, World!"), vector); code != http.StatusAccepted {
		t.Fatalf("the published vector: %d", code)
	}

	// A pull request into the victim, "from the victim itself", signed
	// with our own repository's secret.
	attack := victimPR()
	for name, tc := range map[string]struct {
		srv        *httptest.Server
		targetType string
		targetID   int64
		body       []byte
		sig        string
	}{
		"signed for A, names B":             {e.srv, "repository", repoID, attack, sign(repoSecret, attack)},
		"signed for A, claims target B":     {e.srv, "repository", victimID, attack, sign(repoSecret, attack)},
		"app, installation of another repo": {app, "integration", 1, withInstallation(attack, installID), sign(appSecret, withInstallation(attack, installID))},
		"app, no installation":              {app, "integration", 1, attack, sign(appSecret, attack)},
		"reordered keys":                    {e.srv, "repository", victimID, reorder(t, withInstallation(attack, 99)), sign(victimSecret, withInstallation(attack, 99))},
	} {
		if code := post(t, tc.srv, "pull_request", "g-"+name, tc.targetType, tc.targetID, tc.body, tc.sig); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, code)
		}
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries`); n != 0 {
		t.Fatalf("%d deliveries recorded from refused requests", n)
	}
	// Correctly bound: the victim's own webhook, and the App for the
	// installation registered with the repository.
	if code := post(t, e.srv, "pull_request", "g-own", "repository", victimID, attack, sign(victimSecret, attack)); code != http.StatusAccepted {
		t.Fatalf("the victim's own delivery: %d", code)
	}
	good := withInstallation(attack, 99)
	if code := post(t, app, "pull_request", "g-app", "integration", 1, good, sign(appSecret, good)); code != http.StatusAccepted {
		t.Fatalf("the App's delivery for the right installation: %d", code)
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries WHERE repository_id = $1`, victimID); n != 2 {
		t.Fatalf("%d deliveries recorded, want 2", n)
	}

	// The event name and the GUID are unsigned headers. A pull request's
	// signed body posted as a push is refused; a body replayed under a new
	// GUID is a redelivery.
	if code := post(t, e.srv, "push", "g-pr-as-push", "repository", victimID, attack, sign(victimSecret, attack)); code != http.StatusBadRequest {
		t.Fatalf("a pull request's body as a push: %d, want 400", code)
	}
	if code := post(t, e.srv, "pull_request", "g-replay", "repository", victimID, attack, sign(victimSecret, attack)); code != http.StatusAccepted {
		t.Fatalf("a replayed body: %d", code)
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries WHERE repository_id = $1`, victimID); n != 2 {
		t.Fatalf("%d deliveries after a pull request posing as a push and a replay, want still 2", n)
	}
}

func pgtestProject(t *testing.T, e *env, name string) {
	t.Helper()
	if _, err := e.store.CreateProject(context.Background(), name, "main"); err != nil {
		t.Fatal(err)
	}
}

func victimPR() []byte {
	b, _ := json.Marshal(map[string]any{
		"action": "opened", "number": 1,
		"pull_request": map[string]any{"number": 1,
			"head": map[string]any{"sha": strings.Repeat("a", 40), "ref": "x", "repo": map[string]any{"id": victimID}},
			"base": map[string]any{"sha": strings.Repeat("b", 40), "ref": "main", "repo": map[string]any{"id": victimID}}},
		"repository": map[string]any{"id": victimID, "full_name": victimName},
	})
	return b
}

func withInstallation(body []byte, id int64) []byte {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	m["installation"] = map[string]any{"id": id}
	b, _ := json.Marshal(m)
	return b
}

// reorder writes the same JSON object with its top-level keys reversed.
func reorder(t *testing.T, body []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i := len(keys) - 1; i >= 0; i-- {
		kb, _ := json.Marshal(keys[i])
		b.Write(kb)
		b.WriteByte(':')
		b.Write(m[keys[i]])
		if i > 0 {
			b.WriteByte(',')
		}
	}
	b.WriteByte('}')
	if bytes.Equal(b.Bytes(), body) {
		t.Fatal("reordering changed nothing")
	}
	return b.Bytes()
}

// claimAll plays a runner: it claims every queued job and returns the
// claims by run trigger.
func (e *env) claimAll(t *testing.T) map[string]*store.Claim {
	t.Helper()
	ctx := context.Background()
	reg, _, _ := e.store.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	_, token, _ := e.store.RegisterRunner(ctx, reg, "r-"+strconv.FormatInt(time.Now().UnixNano(), 36), nil)
	runner, _ := e.store.AuthenticateRunner(ctx, token)
	out := map[string]*store.Claim{}
	for {
		c, err := e.store.Claim(ctx, runner, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			return out
		}
		run, _ := e.store.GetRun(ctx, c.Lease.RunID)
		out[run.Trigger] = c
	}
}

// TestForkPullRequest: whether a pull request comes from a fork is read
// from GitHub as the App, so a payload that claims a same-repository head
// does not make a fork's run trusted. The fork's run is untrusted, waits for
// approval (its author is new here), shows so on the commit, gets no
// secrets once approved; the author's next fork run starts at once; a
// branch of the repository runs trusted with the secrets its job names; a
// rejected run ends CANCELED, "rejected by <user>", on the commit too.
func TestForkPullRequest(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if err := e.store.SetSecret(ctx, e.admin, e.project.ID, "DEPLOY_TOKEN", "s3cr3t-value"); err != nil {
		t.Fatal(err)
	}
	dir, sha := gitRepo(t, "jobs:\n  only:\n    secrets: [DEPLOY_TOKEN]\n    env: {T: \"${{ secrets.DEPLOY_TOKEN }}\"}\n    steps:\n      - run: \"true\"\n")
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.pull(7, 555, 900, sha)    // a fork, though the payload says otherwise
	e.pull(8, repoID, 901, sha) // a branch of the repository
	lie := prPayload(sha, 7, repoID)
	e.deliver("pull_request", "guid-fork", lie, sign(repoSecret, lie))
	same := prPayload(sha, 8, repoID)
	e.deliver("pull_request", "guid-branch", same, sign(repoSecret, same))
	if res := e.runOnce(); res.Runs != 2 {
		t.Fatalf("pass: %+v", res)
	}
	claims := e.claimAll(t)
	if len(claims) != 1 || claims["github:pull_request #8"] == nil {
		t.Fatalf("claimed %v: only the branch's run may start", claims)
	}
	branch := claims["github:pull_request #8"]
	if branch.Secrets["DEPLOY_TOKEN"] != "s3cr3t-value" || !bytes.Contains(branch.Job, []byte(`"T":"s3cr3t-value"`)) {
		t.Fatalf("the branch's job did not get its secret: %v %s", branch.Secrets, branch.Job)
	}
	var forkRun store.Run
	if err := e.pool.QueryRow(ctx, `SELECT id FROM runs WHERE trigger LIKE 'github:pull_request #7%'`).Scan(&forkRun.ID); err != nil {
		t.Fatal(err)
	}
	forkRun, _ = e.store.GetRun(ctx, forkRun.ID)
	if forkRun.Trusted || forkRun.Approval != store.ApprovalPending || forkRun.Scope != "refs/pull/7/head" ||
		forkRun.BaseRef != "refs/heads/main" || forkRun.Actor != "github:900" {
		t.Fatalf("fork run: %+v", forkRun)
	}
	jobs, _ := e.store.RunJobs(ctx, forkRun.ID)
	if jobs[0].State != "PENDING" || jobs[0].Reason != store.ReasonWaitingApproval {
		t.Fatalf("fork run's job: %+v", jobs[0])
	}
	e.reconcile()
	if c := checkOf(e, forkRun.ID); c == nil || c.Status != "queued" || c.Output.Title != "Waiting for approval" ||
		!strings.Contains(c.Output.Summary, "forgeci approve "+forkRun.ID) {
		t.Fatalf("fork run's check: %+v", c)
	}

	approved, err := e.store.Approve(ctx, e.admin, forkRun.ID)
	if err != nil || approved.Approval != store.ApprovalApproved || approved.ApprovalBy != "root" || approved.ApprovalAt == nil {
		t.Fatalf("approve: %+v %v", approved, err)
	}
	fork := e.claimAll(t)["github:pull_request #7 from fork user900/hello"]
	if fork == nil || len(fork.Secrets) != 0 || len(fork.Mask) != 0 || bytes.Contains(fork.Job, []byte("s3cr3t")) ||
		!bytes.Contains(fork.Job, []byte(`"T":""`)) {
		t.Fatalf("the approved fork's claim: %+v", fork)
	}

	// The same author's next fork run starts at once; a new author waits,
	// and is rejected. (Of another commit: a fork's run of the commit
	// #8's trusted run built makes no check runs.)
	dir2, sha2 := gitRepo(t, "jobs:\n  only:\n    steps:\n      - run: \"true\"\n")
	e.gh.AddGitCommit(t, repoName, dir2, sha2)
	e.pull(9, 555, 900, sha2)
	e.pull(10, 556, 902, sha2)
	for _, n := range []int{9, 10} {
		p := prPayload(sha2, n, 555)
		e.deliver("pull_request", "guid-pr-"+strconv.Itoa(n), p, sign(repoSecret, p))
	}
	e.runOnce()
	next := e.claimAll(t)
	if len(next) != 1 || next["github:pull_request #9 from fork user900/hello"] == nil {
		t.Fatalf("claims after approval: %v", next)
	}
	var newcomer string
	if err := e.pool.QueryRow(ctx, `SELECT id FROM runs WHERE trigger LIKE 'github:pull_request #10%'`).Scan(&newcomer); err != nil {
		t.Fatal(err)
	}
	rejected, err := e.store.Reject(ctx, e.admin, newcomer)
	if err != nil || rejected.State != "CANCELED" || rejected.Approval != store.ApprovalRejected {
		t.Fatalf("reject: %+v %v", rejected, err)
	}
	jobs, _ = e.store.RunJobs(ctx, newcomer)
	if jobs[0].State != "CANCELED" || jobs[0].Reason != "rejected by root" {
		t.Fatalf("rejected job: %+v", jobs[0])
	}
	e.reconcile()
	if c := checkOf(e, forkRun.ID); c == nil || c.Status != "in_progress" || !strings.Contains(c.Output.Summary, "was approved by root at ") {
		t.Fatalf("approved run's check: %+v", c)
	}
	if c := checkOf(e, newcomer); c == nil || c.Conclusion != "cancelled" || !strings.Contains(c.Output.Summary, "rejected by root") {
		t.Fatalf("rejected run's check: %+v", c)
	}
	if _, err := e.store.Approve(ctx, e.admin, newcomer); err == nil {
		t.Fatal("a rejected run was approved")
	}
}

// checkOf returns the check run of the (one) job of a run.
func checkOf(e *env, runID string) *fakegithubCheck {
	jobs, _ := e.store.RunJobs(context.Background(), runID)
	for _, c := range e.gh.CheckRuns(repoName) {
		if len(jobs) > 0 && c.ExternalID == jobs[0].ID {
			return &c
		}
	}
	return nil
}

type fakegithubCheck = fakegithub.CheckRun
