package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
)

// tenancy is one fresh stack with two projects and a person in every
// relation to the first: the matrix calls each route as each of them.
type tenancy struct {
	*env
	other store.Project // other/svc
	// Tokens: a global admin, members of acme/app by role (its admin holds
	// the secrets permission), an admin of other/svc only, a user with no
	// membership, and a runner.
	global, adminA, writerA, readerA, memberB, nobody string
	trustedWriter                                     string // write and the secrets permission
	writerID, readerID                                string
	writerToken                                       string // the ID of the writer's token
	registration                                      string // the ID of an unused registration token
	runner                                            runnerCreds
	// In acme/app: a finished run, a live run (one queued job), a run
	// from a first-time contributor waiting for approval, a FAILED
	// delivery, a secret, and a source snapshot uploaded in both tiers.
	done, live, waiting store.Run
	liveJob, doneJob    string
	delivery            string
	source              domain.Source
	hook                string                  // a notification hook of acme/app
	sessions            map[string]*http.Cookie // dashboard sessions by token
	// A run whose job "ship" waits for a review to deploy to acme/app's
	// environment production (reviewed by writers).
	deploying store.Run
	shipJob   string
}

func newTenancy(t *testing.T) *tenancy {
	t.Helper()
	e := setup(t)
	keys, err := secretbox.NewFileKeyring(filepath.Join(t.TempDir(), "master.key"), true)
	if err != nil {
		t.Fatal(err)
	}
	e.store.SetKeyring(keys)
	ctx := context.Background()
	f := &tenancy{env: e, other: pgtestProject(t, e, "other/svc")}
	f.global = e.user("root", store.RoleAdmin)
	f.adminA = e.member("alice", e.project.ID, store.RoleAdmin, true)
	f.writerA = e.member("walter", e.project.ID, store.RoleWrite, false)
	f.readerA = e.member("rita", e.project.ID, store.RoleRead, false)
	f.trustedWriter = e.member("sam", e.project.ID, store.RoleWrite, true)
	f.memberB = e.member("bob", f.other.ID, store.RoleAdmin, true)
	_, f.nobody, _ = e.store.CreateUser(ctx, "nina", store.RoleUser)
	f.writerID, f.readerID = f.userID("walter"), f.userID("rita")
	if err := f.pool.QueryRow(ctx, `SELECT id FROM user_tokens WHERE user_id = $1`, f.writerID).Scan(&f.writerToken); err != nil {
		t.Fatal(err)
	}
	f.runner = e.registerRunner("box")
	if _, _, err := e.store.CreateRegistrationToken(ctx, time.Hour, "tenancy", store.Scope{}); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.QueryRow(ctx, `SELECT id FROM registration_tokens WHERE description = 'tenancy'`).Scan(&f.registration); err != nil {
		t.Fatal(err)
	}

	f.done = e.createRun("finished")
	c := e.claim(f.runner)
	f.doneJob = c.Lease.JobID
	// Its artifact "report", which its readers may download.
	report, size := e.putBlob([]byte("a report"))
	if err := e.store.CommitArtifact(ctx, f.runner.ID, c.Lease.JobID, c.Lease, "report", report, size); err != nil {
		t.Fatal(err)
	}
	// And a test report, which its readers may read.
	if err := e.store.SetReport(ctx, f.runner.ID, c.Lease.JobID, c.Lease, protocol.TestSummary{Files: 1, Tests: 1, Failed: 1,
		Failures: []protocol.TestFailure{{Name: "TestTenancy", Kind: "failure", Message: "boom"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Complete(ctx, f.runner.ID, c.Lease.JobID, c.Lease, domain.OutcomeFailed, 1); err != nil {
		t.Fatal(err)
	}
	admin, err := e.store.AuthenticateUser(ctx, f.adminA)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := e.store.AddHook(ctx, admin, e.project.ID, "https://hooks.example.com/acme", "json", []string{"run_ended"})
	if err != nil {
		t.Fatal(err)
	}
	f.hook = h.ID
	f.live = e.createRun("queued")
	f.liveJob = f.live.JobIDs["queued"]
	f.waiting, err = e.store.CreateRun(ctx, store.NewRun{Project: "acme/app", Untrusted: true, Actor: "github:77",
		Scope: "refs/pull/1/head", Jobs: []store.NewJob{{Name: "fork"}}})
	if err != nil || f.waiting.Approval != store.ApprovalPending {
		t.Fatalf("waiting run: %+v %v", f.waiting, err)
	}
	e.exec(`INSERT INTO scm_repositories (github_id, full_name, installation_id, webhook_secret, project_id)
		VALUES (5, 'acme/app', 1, 'a webhook secret of length', $1)`, e.project.ID)
	f.delivery = "delivery-1"
	e.exec(`INSERT INTO scm_deliveries (guid, event, repository_id, payload, state, finished_at)
		VALUES ($1, 'push', 5, '{}', 'FAILED', now())`, f.delivery)
	global, err := e.store.AuthenticateUser(ctx, f.global)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetVariable(ctx, global, e.project.ID, "REGION", "eu-west-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetSecret(ctx, global, e.project.ID, "DEPLOY_TOKEN", "a secret value"); err != nil {
		t.Fatal(err)
	}
	f.source = f.uploadSource("jobs:\n  a:\n    steps: [{run: 'true'}]\n")
	f.waitingDeployment(global)
	return f
}

// waitingDeployment makes environment production and a run whose job
// waits for a review to deploy there.
func (f *tenancy) waitingDeployment(global store.User) {
	ctx := context.Background()
	if _, err := f.store.SetEnvironment(ctx, global, "acme/app", store.Environment{Name: "production",
		ReviewerRole: store.RoleWrite, AllowedRefs: []string{"main"}}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.store.SetScopedSecret(ctx, global, f.project.ID, "production", "PROD_TOKEN", "a production secret"); err != nil {
		f.t.Fatal(err)
	}
	run, err := f.store.CreateRun(ctx, store.NewRun{Project: "acme/app", GitRef: "refs/heads/main",
		Jobs: []store.NewJob{{Name: "ship", Spec: domain.JobSpec{Environment: &domain.EnvironmentSpec{Name: "production"}}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.deploying, f.shipJob = run, run.JobIDs["ship"]
}

func pgtestProject(t *testing.T, e *env, name string) store.Project {
	t.Helper()
	p, err := e.store.CreateProject(context.Background(), name, "main")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// session is a dashboard session of token's, opened once.
func (f *tenancy) session(token string) *http.Cookie {
	if f.sessions == nil {
		f.sessions = map[string]*http.Cookie{}
	}
	if c, ok := f.sessions[token]; ok {
		return c
	}
	c := pgtest.SessionCookie(f.t, f.store, token)
	f.sessions[token] = c
	return c
}

func (f *tenancy) userID(name string) string {
	var id string
	if err := f.pool.QueryRow(context.Background(), `SELECT id FROM users WHERE name = $1`, name).Scan(&id); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// uploadSource puts a real snapshot with the pipeline yml into both tiers
// of acme/app (unregistered), as a trusted and an untrusted member would.
func (f *tenancy) uploadSource(yml string) domain.Source { return f.uploadPipeline(yml, true, false) }

// expand fills a path template's {placeholders} from the fixture.
func (f *tenancy) expand(path string) string {
	return strings.NewReplacer("{done}", f.done.ID, "{live}", f.live.ID, "{waiting}", f.waiting.ID,
		"{doneJob}", f.doneJob, "{liveJob}", f.liveJob, "{project}", f.project.ID, "{writer}", f.writerID, "{writerToken}", f.writerToken,
		"{reader}", f.readerID, "{runner}", f.runner.ID, "{guid}", f.delivery, "{hook}", f.hook,
		"{deploying}", f.deploying.ID, "{shipJob}", f.shipJob, "{registration}", f.registration).Replace(path)
}

// call makes one request as a bearer token (API) or a cookie (dashboard).
func (f *tenancy) call(method, path, token string, body any, page bool) (int, string) {
	f.t.Helper()
	var rd io.Reader
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case rawJSON:
		rd = strings.NewReader(string(b))
	case string: // a form
		rd, ctype = strings.NewReader(b), "application/x-www-form-urlencoded"
	default:
		rd = bytes.NewReader(mustJSON(f.t, b))
	}
	req, _ := http.NewRequest(method, f.srv.URL+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", ctype)
	}
	if page {
		req.AddCookie(f.session(token))
	} else {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

var noRedirect = &http.Client{Timeout: 30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// state renders every row a user route or page could change, and the CAS.
func (f *tenancy) state() string {
	var b strings.Builder
	b.WriteString(f.snapshot())
	for _, table := range []string{"project_members", "project_secrets", "project_keys", "approved_actors", "users",
		"user_tokens", "scm_deliveries", "check_runs", "environments", "deployments"} {
		rows, err := f.pool.Query(context.Background(), `SELECT `+rowText(table)+` FROM `+table+` t ORDER BY 1`)
		if err != nil {
			f.t.Fatal(err)
		}
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			fmt.Fprintf(&b, "%s %s\n", table, s)
		}
		rows.Close()
	}
	return b.String()
}

// rawJSON is a request body sent as it is.
type rawJSON string

func itoa(n int64) string { return fmt.Sprint(n) }
