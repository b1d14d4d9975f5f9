package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

func (e *env) get(path, token string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// user makes a global admin (role admin), or a user who is a member of
// acme/app with role (read or write) and without the secrets permission.
func (e *env) user(name, role string) string {
	e.t.Helper()
	if role == store.RoleAdmin {
		_, token, err := e.store.CreateUser(context.Background(), name, store.RoleAdmin)
		if err != nil {
			e.t.Fatal(err)
		}
		return token
	}
	return e.member(name, e.project.ID, role, false)
}

// member makes a user who is a member of one project.
func (e *env) member(name, projectID, role string, secrets bool) string {
	e.t.Helper()
	u, token, err := e.store.CreateUser(context.Background(), name, store.RoleUser)
	if err != nil {
		e.t.Fatal(err)
	}
	e.exec(`INSERT INTO project_members (project_id, user_id, role, secrets) VALUES ($1, $2, $3, $4)`, projectID, u.ID, role, secrets)
	return token
}

// TestManageAPI: lists, job attempts, retry as a new run, and the admin
// routes with their role checks.
func TestManageAPI(t *testing.T) {
	e := setup(t)
	admin, reader := e.user("root", store.RoleAdmin), e.user("viewer", store.RoleRead)
	run := e.createRun("build", "test:build")
	r := e.registerRunner("box")
	c := e.claim(r)
	if st, b := e.post("/v1/runner/jobs/"+c.Lease.JobID+"/complete", r.Token, leaseBody(c.Lease, map[string]any{"outcome": "failed", "exit_code": 3})); st != 200 {
		t.Fatalf("complete: %d %s", st, b)
	}

	st, b := e.get("/v1/runs?project=acme/app", reader)
	var runs struct{ Runs []store.Run }
	_ = json.Unmarshal(b, &runs)
	if st != 200 || len(runs.Runs) != 1 || runs.Runs[0].ID != run.ID || runs.Runs[0].State != "FAILED" {
		t.Fatalf("list runs: %d %s", st, b)
	}
	st, b = e.get("/v1/runs/"+run.ID+"/jobs/"+c.Lease.JobID, reader)
	var job store.JobDetail
	_ = json.Unmarshal(b, &job)
	if st != 200 || len(job.Attempts) != 1 || job.Attempts[0].Outcome != "FAILED" || job.Attempts[0].RunnerName != "box" ||
		*job.Attempts[0].ExitCode != 3 {
		t.Fatalf("job detail: %d %s", st, b)
	}
	if st, _ := e.get("/v1/projects", reader); st != 200 {
		t.Fatalf("projects: %d", st)
	}

	// Retry needs the write role; it makes a new run of that job alone.
	if st, _ := e.post("/v1/runs/"+run.ID+"/jobs/"+c.Lease.JobID+"/retry", reader, map[string]any{}); st != http.StatusForbidden {
		t.Fatalf("retry as reader: %d", st)
	}
	st, b = e.post("/v1/runs/"+run.ID+"/jobs/"+c.Lease.JobID+"/retry", admin, map[string]any{})
	var retried struct {
		store.Run
		Jobs []store.JobInfo
	}
	_ = json.Unmarshal(b, &retried)
	if st != 201 || retried.ID == run.ID || len(retried.Jobs) != 1 || retried.Jobs[0].Name != "build" || retried.Jobs[0].State != "QUEUED" {
		t.Fatalf("retry job: %d %s", st, b)
	}
	if retried.Trigger != "retry of #1 build by root" {
		t.Fatalf("trigger %q", retried.Trigger)
	}
	if st, b := e.post("/v1/runs/"+retried.ID+"/retry", admin, map[string]any{}); st != http.StatusConflict {
		t.Fatalf("retry of an unfinished run: %d %s", st, b)
	}

	// Admin routes refuse readers, and work for admins.
	if st, _ := e.post("/v1/runners/"+r.ID+"/revoke", reader, map[string]any{}); st != http.StatusForbidden {
		t.Fatalf("revoke as reader: %d", st)
	}
	if st, _ := e.post("/v1/runners/"+r.ID+"/revoke", admin, map[string]any{}); st != 200 {
		t.Fatalf("revoke: %d", st)
	}
	if st, b := e.post("/v1/runner/claim", r.Token, map[string]any{}); st != http.StatusUnauthorized {
		t.Fatalf("revoked runner claims: %d %s", st, b)
	}
	st, b = e.post("/v1/registration-tokens", admin, map[string]any{"ttl_seconds": 600, "description": "office box"})
	if st != 201 || str(b, "registration_token") == "" {
		t.Fatalf("registration token: %d %s", st, b)
	}
	if st, b := e.post("/v1/registration-tokens", admin, map[string]any{"ttl_seconds": 5}); st != 400 || errCode(b) != domain.EInvalid {
		t.Fatalf("5 s registration token: %d %s", st, b)
	}
	if st, b := e.post("/v1/users", admin, map[string]any{"name": "dev", "role": "write"}); st != 400 {
		t.Fatalf("a global write role: %d %s", st, b)
	}
	st, b = e.post("/v1/users", admin, map[string]any{"name": "dev", "role": "user"})
	devToken := str(b, "token")
	if st != 201 || devToken == "" {
		t.Fatalf("create user: %d %s", st, b)
	}
	st, b = e.get("/v1/me", devToken)
	if st != 200 || str(b, "role") != "user" {
		t.Fatalf("me: %d %s", st, b)
	}
	devID := str(b, "id")
	st, b = e.post("/v1/users/me/tokens", devToken, map[string]any{"description": "laptop"})
	second := str(b, "token")
	if st != 201 || second == "" || str(b, "expires_at") != "" {
		t.Fatalf("own token: %d %s", st, b)
	}
	if st, b := e.post("/v1/users/me/tokens", devToken, map[string]any{"expires_in_days": 7}); st != 201 || str(b, "expires_at") == "" {
		t.Fatalf("a token for a week: %d %s, want its expiry", st, b)
	}
	if st, b := e.post("/v1/users/me/tokens", devToken, map[string]any{"expires_in_days": 4000}); st != http.StatusBadRequest {
		t.Fatalf("a token for 4000 days: %d %s, want 400", st, b)
	}
	if st, _ := e.post("/v1/users/"+devID+"/disable", reader, map[string]any{}); st != http.StatusForbidden {
		t.Fatalf("disable as reader: %d", st)
	}
	if st, _ := e.post("/v1/users/"+devID+"/disable", admin, map[string]any{}); st != 200 {
		t.Fatalf("disable: %d", st)
	}
	for _, tok := range []string{devToken, second} {
		if st, _ := e.get("/v1/me", tok); st != http.StatusUnauthorized {
			t.Fatalf("disabled user's token: %d", st)
		}
	}
	if st, _ := e.get("/v1/deliveries", admin); st != 200 {
		t.Fatalf("deliveries: %d", st)
	}
}

// TestRevocationNamesTheRunnersToCheck: disabling a user, or revoking a
// token, answers with the live runners registered with registration
// tokens its tokens made (they stay registered: the operator decides).
func TestRevocationNamesTheRunnersToCheck(t *testing.T) {
	e := setup(t)
	admin := e.user("root", store.RoleAdmin)
	st, b := e.post("/v1/users", admin, map[string]any{"name": "ops", "role": "admin"})
	ops := str(b, "token")
	if st != 201 || ops == "" {
		t.Fatalf("create user: %d %s", st, b)
	}
	st, b = e.post("/v1/registration-tokens", ops, map[string]any{"ttl_seconds": 600})
	if st != 201 {
		t.Fatalf("registration token: %d %s", st, b)
	}
	st, b = e.post("/v1/runners/register", "", map[string]any{"registration_token": str(b, "registration_token"), "name": "ops-box",
		"labels": []string{"linux"}})
	runner := str(b, "runner_id")
	if st != 201 || runner == "" {
		t.Fatalf("register: %d %s", st, b)
	}
	_, b = e.get("/v1/me", ops)
	st, b = e.post("/v1/users/"+str(b, "id")+"/disable", admin, map[string]any{})
	var out struct {
		RunnersToCheck []string `json:"runners_to_check"`
	}
	if err := json.Unmarshal(b, &out); st != 200 || err != nil || len(out.RunnersToCheck) != 1 || out.RunnersToCheck[0] != runner {
		t.Fatalf("disable: %d %s, want runners_to_check [%s]", st, b, runner)
	}
}

// TestUntrustedOnlyRegistration: a registration token asked for untrusted
// work only hands that scope to its runner, and both lists say so.
func TestUntrustedOnlyRegistration(t *testing.T) {
	e := setup(t)
	admin := e.user("root", store.RoleAdmin)
	st, b := e.post("/v1/registration-tokens", admin, map[string]any{"ttl_seconds": 600, "untrusted_only": true})
	if st != 201 {
		t.Fatalf("registration token: %d %s", st, b)
	}
	st, b = e.post("/v1/runners/register", "", map[string]any{"registration_token": str(b, "registration_token"), "name": "forks",
		"labels": []string{"linux"}})
	if st != 201 {
		t.Fatalf("register: %d %s", st, b)
	}
	for path, list := range map[string]string{"/v1/runners": "runners", "/v1/registration-tokens": "registration_tokens"} {
		st, b := e.get(path, admin)
		var page map[string]json.RawMessage
		var out []struct {
			Untrusted     bool `json:"untrusted"`
			UntrustedOnly bool `json:"untrusted_only"`
		}
		err := json.Unmarshal(b, &page)
		if err == nil {
			err = json.Unmarshal(page[list], &out)
		}
		if st != 200 || err != nil || len(out) != 1 || !out[0].Untrusted || !out[0].UntrustedOnly {
			t.Errorf("%s: %d %s, want one, untrusted and untrusted_only", path, st, b)
		}
	}
}
