package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/forgeci/forgeci/shared/domain"
)

// jobRoutes are every job-scoped runner route with a body that is valid
// apart from the lease.
var jobRoutes = []struct {
	path  string
	extra map[string]any
}{
	{"heartbeat", nil},
	{"source", nil},
	{"logs", map[string]any{"offset": 0, "data": []byte("hello\n")}},
	{"artifacts", map[string]any{"name": "dist", "digest": "sha256:" + strings.Repeat("a", 64), "size": 3}},
	{"artifacts/commit", map[string]any{"name": "dist", "digest": "sha256:" + strings.Repeat("a", 64), "size": 3}},
	{"artifacts/fetch", map[string]any{"job": "build", "name": "dist"}},
	{"cache/restore", map[string]any{"keys": []string{"go-"}}},
	{"cache/save", map[string]any{"key": "go-1", "digest": "sha256:" + strings.Repeat("b", 64), "size": 3}},
	{"cache/commit", map[string]any{"key": "go-1", "digest": "sha256:" + strings.Repeat("b", 64), "size": 3}},
	{"complete", map[string]any{"outcome": "passed", "exit_code": 0}},
}

// TestFencingMatrix: every job-scoped route × every way a caller can fail to
// hold the current lease is rejected with the protocol's code, and the
// database is byte-for-byte unchanged. The exact tuple is accepted.
func TestFencingMatrix(t *testing.T) {
	cases := []struct {
		name   string
		status int
		code   string
		// prepare breaks one element; it returns the token and lease to use.
		prepare func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease)
	}{
		{"wrong runner token", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			return b.Token, c.Lease // B's valid token, A's tuple
		}},
		{"unknown token", 401, domain.EUnauthorized, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			return "frt_" + strings.Repeat("x", 43), c.Lease
		}},
		{"wrong lease id", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			l := c.Lease
			l.LeaseID = uuid.NewString()
			return a.Token, l
		}},
		{"wrong generation", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			l := c.Lease
			l.Generation = 2
			return a.Token, l
		}},
		{"wrong run id", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			l := c.Lease
			l.RunID = uuid.NewString()
			return a.Token, l
		}},
		{"lease runner is not token runner", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			l := c.Lease
			l.RunnerID = b.ID
			return b.Token, l // B claims to be the lease holder
		}},
		{"expired lease", 409, domain.ELeaseExpired, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			e.exec(`UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.Job.ID)
			return a.Token, c.Lease
		}},
		{"job already terminal", 409, domain.EJobFinished, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			if s, body := e.post("/v1/runner/jobs/"+c.Job.ID+"/complete", a.Token,
				leaseBody(c.Lease, map[string]any{"outcome": "failed", "exit_code": 1})); s != 200 {
				t.Fatalf("complete: %d %s", s, body)
			}
			return a.Token, c.Lease
		}},
		{"revoked runner", 401, domain.EUnauthorized, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			e.exec(`UPDATE runners SET revoked_at = now() WHERE id = $1`, a.ID)
			return a.Token, c.Lease
		}},
		{"path job is not lease job", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c domain.Claim) (string, domain.Lease) {
			l := c.Lease
			l.JobID = uuid.NewString()
			return a.Token, l
		}},
	}
	e := setup(t)
	a := e.registerRunner("a")
	b := e.registerRunner("b")
	for _, route := range jobRoutes {
		for _, tc := range cases {
			t.Run(route.path+"/"+tc.name, func(t *testing.T) {
				e.t = t
				e.createRun("build")
				c := e.claim(a)
				token, lease := tc.prepare(e, a, b, c)
				before := e.snapshot()
				status, body := e.post(fmt.Sprintf("/v1/runner/jobs/%s/%s", c.Job.ID, route.path), token, leaseBody(lease, route.extra))
				if status != tc.status || errCode(body) != tc.code {
					t.Fatalf("got %d %s, want %d %s", status, body, tc.status, tc.code)
				}
				if after := e.snapshot(); after != before {
					t.Fatalf("rejected call changed the database:\nbefore:\n%s\nafter:\n%s", before, after)
				}
				// Leave no running job behind for the next case's claim.
				e.exec(`UPDATE runners SET revoked_at = NULL`)
				e.exec(`UPDATE jobs SET state = 'CANCELED', finished_at = now() WHERE state = 'RUNNING'`)
			})
		}
		t.Run(route.path+"/exact tuple", func(t *testing.T) {
			e.t = t
			e.createRun("build")
			c := e.claim(a)
			status, body := e.post(fmt.Sprintf("/v1/runner/jobs/%s/%s", c.Job.ID, route.path), a.Token, leaseBody(c.Lease, route.extra))
			switch {
			case status == http.StatusConflict || status == http.StatusUnauthorized:
				t.Fatalf("exact tuple rejected: %d %s", status, body)
			case route.path == "complete" && (status != 200 || str(body, "state") != domain.JobPassed):
				t.Fatalf("complete: %d %s", status, body)
			case (route.path == "heartbeat" || route.path == "logs") && status != 200:
				t.Fatalf("%s: %d %s", route.path, status, body)
			}
			e.exec(`UPDATE jobs SET state = 'CANCELED', finished_at = now() WHERE state = 'RUNNING'`)
		})
	}
}

// TestThreeWayCompletion: only the exact (runner, lease, generation) completes.
func TestThreeWayCompletion(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("a")
	e.createRun("build")
	c := e.claim(a)
	path := "/v1/runner/jobs/" + c.Job.ID + "/complete"
	done := map[string]any{"outcome": "passed", "exit_code": 0}

	wrongLease := c.Lease
	wrongLease.LeaseID = uuid.NewString()
	if s, body := e.post(path, a.Token, leaseBody(wrongLease, done)); s != 409 || errCode(body) != domain.ELeaseMismatch {
		t.Fatalf("A, wrong lease, gen 1: %d %s", s, body)
	}
	wrongGen := c.Lease
	wrongGen.Generation = 999
	if s, body := e.post(path, a.Token, leaseBody(wrongGen, done)); s != 409 || errCode(body) != domain.ELeaseMismatch {
		t.Fatalf("A, lease L, gen 999: %d %s", s, body)
	}
	if got := e.jobState(c.Job.ID); got != domain.JobRunning {
		t.Fatalf("after rejected completions job is %s", got)
	}
	if s, body := e.post(path, a.Token, leaseBody(c.Lease, done)); s != 200 || str(body, "state") != domain.JobPassed {
		t.Fatalf("A, lease L, gen 1: %d %s", s, body)
	}
	if got := e.jobState(c.Job.ID); got != domain.JobPassed {
		t.Fatalf("job is %s, want PASSED", got)
	}
}
