package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// routeCase is a job-scoped runner route with a body that is valid apart
// from the lease, and the status the exact tuple gets.
type routeCase struct {
	path   string
	extra  map[string]any
	status int
}

// jobRoutes are every job-scoped runner route. Blobs named in bodies are
// real objects in S3, so an accepted call would really write.
func jobRoutes(e *env) []routeCase {
	art, artSize := e.putBlob([]byte("artifact bytes"))
	cache, cacheSize := e.putBlob([]byte("cache bytes"))
	return []routeCase{
		{"heartbeat", nil, 200},
		{"source", nil, 200},
		{"logs", map[string]any{"offset": 0, "data": []byte("hello\n")}, 200},
		// With step events and line times: the slow path, one transaction.
		{"logs", map[string]any{"offset": 0, "data": []byte("==> step 1/1: x\n"), "times": [][2]int64{{0, time.Now().UnixMilli()}},
			"steps": []map[string]any{{"index": 0, "name": "x", "log_offset": 0, "started_at": time.Now().UTC()}}}, 200},
		{"artifacts", map[string]any{"name": "out", "digest": "sha256:" + strings.Repeat("a", 64), "size": 3}, 200},
		{"artifacts/commit", map[string]any{"name": "out", "digest": art, "size": artSize}, 201},
		{"artifacts/fetch", map[string]any{"job": "up", "name": "dist"}, 200},
		{"cache/restore", map[string]any{"keys": []string{"go-"}}, 204},
		{"cache/save", map[string]any{"key": "go-1", "digest": "sha256:" + strings.Repeat("b", 64), "size": 3}, 200},
		{"cache/commit", map[string]any{"key": "go-1", "digest": cache, "size": cacheSize}, 201},
		{"outputs", map[string]any{"outputs": map[string]string{"version": "1.2.3"}}, 200},
		{"report", map[string]any{"summary": map[string]any{"files": 1, "tests": 2, "passed": 1, "failed": 1,
			"failures": []map[string]any{{"name": "TestX", "kind": "failure", "message": "boom", "file": "x_test.go", "line": 3}}}}, 200},
		{"id-token", map[string]any{"audience": "sts.amazonaws.com"}, 200},
		{"complete", map[string]any{"outcome": "passed", "exit_code": 0}, 200},
	}
}

// leasedBuild makes a run whose job "build" needs "up" (passed, with an
// artifact "dist") and returns runner a's claim of "build".
func (e *env) leasedBuild(a runnerCreds) protocol.Claim {
	e.t.Helper()
	ctx := context.Background()
	src, srcSize := e.putBlob([]byte("source snapshot stand-in"))
	dist, distSize := e.putBlob([]byte("dist of up"))
	_, err := e.store.CreateRun(ctx, store.NewRun{Project: "acme/app", GitRef: "refs/heads/main",
		Source: domain.Source{BlobDigest: src, ManifestDigest: "sha256:" + strings.Repeat("c", 64), Size: srcSize},
		Jobs: []store.NewJob{{Name: "up"}, {Name: "build", Needs: []string{"up"},
			Spec: domain.JobSpec{NeedArtifacts: []domain.NeedArtifact{{Job: "up", Name: "dist"}}, IDToken: true}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	up := e.claim(a)
	if err := e.store.CommitArtifact(ctx, a.ID, up.Job.ID, up.Lease, "dist", dist, distSize); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Complete(ctx, a.ID, up.Job.ID, up.Lease, domain.OutcomePassed, 0); err != nil {
		e.t.Fatal(err)
	}
	c := e.claim(a)
	if c.Job.Name != "build" {
		e.t.Fatalf("claimed %s, want build", c.Job.Name)
	}
	return c
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
		prepare func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease)
	}{
		{"wrong runner token", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			return b.Token, c.Lease // B's valid token, A's tuple
		}},
		{"unknown token", 401, domain.EUnauthorized, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			return "frt_" + strings.Repeat("x", 43), c.Lease
		}},
		{"wrong lease id", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			l := c.Lease
			l.LeaseID = uuid.NewString()
			return a.Token, l
		}},
		{"wrong generation", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			l := c.Lease
			l.Generation = 2
			return a.Token, l
		}},
		{"wrong run id", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			l := c.Lease
			l.RunID = uuid.NewString()
			return a.Token, l
		}},
		{"lease runner is not token runner", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			l := c.Lease
			l.RunnerID = b.ID
			return b.Token, l // B claims to be the lease holder
		}},
		{"expired lease", 409, domain.ELeaseExpired, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			e.exec(`UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.Job.ID)
			return a.Token, c.Lease
		}},
		{"job already terminal", 409, domain.EJobFinished, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			if s, body := e.post("/v1/runner/jobs/"+c.Job.ID+"/complete", a.Token,
				leaseBody(c.Lease, map[string]any{"outcome": "failed", "exit_code": 1})); s != 200 {
				t.Fatalf("complete: %d %s", s, body)
			}
			return a.Token, c.Lease
		}},
		{"revoked runner", 401, domain.EUnauthorized, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			e.exec(`UPDATE runners SET revoked_at = now() WHERE id = $1`, a.ID)
			return a.Token, c.Lease
		}},
		{"path job is not lease job", 409, domain.ELeaseMismatch, func(e *env, a, b runnerCreds, c protocol.Claim) (string, domain.Lease) {
			l := c.Lease
			l.JobID = uuid.NewString()
			return a.Token, l
		}},
	}
	e := setup(t)
	a := e.registerRunner("a")
	b := e.registerRunner("b")
	for _, route := range jobRoutes(e) {
		for _, tc := range cases {
			t.Run(route.path+"/"+tc.name, func(t *testing.T) {
				e.t = t
				c := e.leasedBuild(a)
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
			c := e.leasedBuild(a)
			status, body := e.post(fmt.Sprintf("/v1/runner/jobs/%s/%s", c.Job.ID, route.path), a.Token, leaseBody(c.Lease, route.extra))
			if status != route.status {
				t.Fatalf("exact tuple: %d %s, want %d", status, body, route.status)
			}
			if route.path == "complete" && str(body, "state") != domain.JobPassed {
				t.Fatalf("complete: %s", body)
			}
			if route.path == "logs" && route.extra["steps"] != nil {
				var n int
				if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM job_steps WHERE job_id = $1`, c.Job.ID).Scan(&n); err != nil || n != 1 {
					t.Fatalf("steps stored: %d %v", n, err)
				}
			}
			if route.path == "report" {
				var failed int
				if err := e.pool.QueryRow(context.Background(), `SELECT failed FROM job_reports WHERE job_id = $1`, c.Job.ID).Scan(&failed); err != nil || failed != 1 {
					t.Fatalf("report stored: %d %v", failed, err)
				}
			}
			if route.path == "outputs" {
				var got string
				if err := e.pool.QueryRow(context.Background(), `SELECT outputs->>'version' FROM jobs WHERE id = $1`, c.Job.ID).Scan(&got); err != nil || got != "1.2.3" {
					t.Fatalf("outputs stored: %q %v", got, err)
				}
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
