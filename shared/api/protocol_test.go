package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

func jobPath(c protocol.Claim, route string) string {
	return "/v1/runner/jobs/" + c.Job.ID + "/" + route
}

// TestStaleOwner: after the sweeper aborts A's expired lease, A's heartbeat,
// log append and completion are all rejected; with an explicit retry the job
// is re-leased to B as generation 2, and A's generation-1 calls stay rejected
// while B's succeed.
func TestStaleOwner(t *testing.T) {
	t.Run("aborted by the sweeper", func(t *testing.T) {
		e := setup(t)
		a := e.registerRunner("a")
		e.createRun("build")
		c := e.claim(a)
		e.exec(`UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.Job.ID)
		res, err := e.store.Sweep(context.Background())
		if err != nil || res.Aborted != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
		var reason, outcome string
		if err := e.pool.QueryRow(context.Background(), `
			SELECT j.reason, a.outcome FROM jobs j JOIN job_attempts a ON a.job_id = j.id WHERE j.id = $1`,
			c.Job.ID).Scan(&reason, &outcome); err != nil {
			t.Fatal(err)
		}
		if e.jobState(c.Job.ID) != domain.JobAborted || reason != domain.ReasonLeaseExpired || outcome != domain.JobAborted {
			t.Fatalf("job %s reason %s attempt %s", e.jobState(c.Job.ID), reason, outcome)
		}
		before := e.snapshot()
		for _, r := range []struct {
			route string
			extra map[string]any
		}{
			{"heartbeat", nil},
			{"logs", map[string]any{"offset": 0, "data": []byte("late")}},
			{"complete", map[string]any{"outcome": "passed", "exit_code": 0}},
		} {
			if s, body := e.post(jobPath(c, r.route), a.Token, leaseBody(c.Lease, r.extra)); s != 409 || errCode(body) != domain.EJobFinished {
				t.Errorf("%s after abort: %d %s", r.route, s, body)
			}
		}
		if e.snapshot() != before {
			t.Fatal("late calls changed the database")
		}
	})

	t.Run("re-leased to another runner", func(t *testing.T) {
		e := setup(t)
		a := e.registerRunner("a")
		b := e.registerRunner("b")
		run, err := e.store.CreateRun(context.Background(), store.NewRun{Project: "acme/app", Jobs: []store.NewJob{
			{Name: "build", RetryLeaseLost: 1, Spec: domain.JobSpec{Steps: []domain.Step{{Name: "s", Run: "true"}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		ca := e.claim(a)
		e.exec(`UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, ca.Job.ID)
		if res, err := e.store.Sweep(context.Background()); err != nil || res.Requeued != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
		cb := e.claim(b)
		if cb.Job.ID != ca.Job.ID || cb.Lease.Generation != 2 || cb.Lease.LeaseID == ca.Lease.LeaseID {
			t.Fatalf("re-lease: %+v after %+v", cb.Lease, ca.Lease)
		}
		calls := []struct {
			route string
			extra map[string]any
		}{
			{"heartbeat", nil},
			{"logs", map[string]any{"offset": 0, "data": []byte("from A\n")}},
			{"complete", map[string]any{"outcome": "failed", "exit_code": 3}},
		}
		for _, r := range calls {
			before := e.snapshot()
			if s, body := e.post(jobPath(ca, r.route), a.Token, leaseBody(ca.Lease, r.extra)); s != 409 || errCode(body) != domain.ELeaseMismatch {
				t.Errorf("A gen 1 %s: %d %s", r.route, s, body)
			}
			if e.snapshot() != before {
				t.Fatalf("A's rejected %s changed the database", r.route)
			}
		}
		if s, body := e.post(jobPath(cb, "heartbeat"), b.Token, leaseBody(cb.Lease, nil)); s != 200 {
			t.Fatalf("B heartbeat: %d %s", s, body)
		}
		if s, body := e.post(jobPath(cb, "logs"), b.Token, leaseBody(cb.Lease, map[string]any{"offset": 0, "data": []byte("from B\n")})); s != 200 {
			t.Fatalf("B logs: %d %s", s, body)
		}
		if s, body := e.post(jobPath(cb, "complete"), b.Token, leaseBody(cb.Lease, map[string]any{"outcome": "passed", "exit_code": 0})); s != 200 {
			t.Fatalf("B complete: %d %s", s, body)
		}
		got, err := e.store.GetRun(context.Background(), run.ID)
		if err != nil || got.State != domain.RunPassed {
			t.Fatalf("run: %+v %v", got, err)
		}
		var attempts []string
		rows, _ := e.pool.Query(context.Background(), `SELECT generation || ':' || runner_id || ':' || outcome FROM job_attempts WHERE job_id = $1 ORDER BY generation`, ca.Job.ID)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			attempts = append(attempts, s)
		}
		want := []string{"1:" + a.ID + ":ABORTED", "2:" + b.ID + ":PASSED"}
		if fmt.Sprint(attempts) != fmt.Sprint(want) {
			t.Fatalf("attempts %v, want %v", attempts, want)
		}
		var logs string
		_ = e.pool.QueryRow(context.Background(), `SELECT string_agg(convert_from(data, 'UTF8'), '' ORDER BY generation, start_offset) FROM log_chunks WHERE job_id = $1`, ca.Job.ID).Scan(&logs)
		if logs != "from B\n" {
			t.Fatalf("log holds %q: a stale runner's output got in", logs)
		}
	})
}

// TestClaimRace: 32 concurrent claimers over 2,000 queued jobs claim every
// job exactly once.
func TestClaimRace(t *testing.T) {
	e := setup(t)
	const jobs, claimers = 2000, 32
	for r := range 2 { // a run holds at most 1,000 jobs
		nr := store.NewRun{Project: "acme/app"}
		for i := range jobs / 2 {
			nr.Jobs = append(nr.Jobs, store.NewJob{Name: fmt.Sprintf("r%d-j%04d", r, i)})
		}
		if _, err := e.store.CreateRun(context.Background(), nr); err != nil {
			t.Fatal(err)
		}
	}
	runners := make([]store.Runner, claimers)
	for i := range runners {
		r := e.registerRunner(fmt.Sprintf("r%d", i))
		runners[i] = store.Runner{ID: r.ID}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	for i := range claimers {
		wg.Add(1)
		go func(r store.Runner) {
			defer wg.Done()
			for {
				c, err := e.store.Claim(context.Background(), r, nil, 0)
				if err != nil {
					errs <- err
					return
				}
				if c == nil {
					return
				}
				mu.Lock()
				seen[c.Lease.JobID]++
				mu.Unlock()
			}
		}(runners[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != jobs {
		t.Fatalf("claimed %d distinct jobs, want %d", len(seen), jobs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %s claimed %d times", id, n)
		}
	}
	var running, firstGen int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'RUNNING'), count(*) FILTER (WHERE generation = 1) FROM jobs`).Scan(&running, &firstGen)
	if running != jobs || firstGen != jobs {
		t.Fatalf("%d jobs running and %d at generation 1, want %d", running, firstGen, jobs)
	}
}

// TestBadInput: malformed, unknown, oversized and incomplete bodies get a
// 400 or 413 with a clear message and write nothing.
func TestBadInput(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("a")
	e.createRun("build")
	c := e.claim(a)
	lease, _ := json.Marshal(c.Lease)
	cases := []struct {
		name, route string
		body        []byte
		status      int
		message     string
	}{
		{"malformed json", "heartbeat", []byte(`{"lease": {`), 400, "truncated"},
		{"not json", "heartbeat", []byte(`hello`), 400, "not valid JSON"},
		{"empty body", "heartbeat", nil, 400, "empty"},
		{"two objects", "heartbeat", []byte(`{"lease":` + string(lease) + `}{}`), 400, "exactly one"},
		{"unknown field", "heartbeat", []byte(`{"lease":` + string(lease) + `,"extra":1}`), 400, `unknown field "extra"`},
		{"unknown lease field", "heartbeat", []byte(`{"lease":{"run_id":"x","bogus":1}}`), 400, `unknown field "bogus"`},
		{"missing lease", "heartbeat", []byte(`{}`), 400, "lease is required"},
		{"missing lease id", "heartbeat", []byte(fmt.Sprintf(`{"lease":{"run_id":%q,"job_id":%q,"runner_id":%q,"generation":1}}`, c.Lease.RunID, c.Lease.JobID, c.Lease.RunnerID)), 400, "lease.lease_id is required"},
		{"missing generation", "heartbeat", []byte(fmt.Sprintf(`{"lease":{"run_id":%q,"job_id":%q,"runner_id":%q,"lease_id":%q}}`, c.Lease.RunID, c.Lease.JobID, c.Lease.RunnerID, c.Lease.LeaseID)), 400, "generation"},
		{"wrong type", "heartbeat", []byte(`{"lease":{"generation":"one"}}`), 400, "lease.generation"},
		{"oversized body", "heartbeat", []byte(`{"lease":` + string(lease) + `,"pad":"` + strings.Repeat("x", 100<<10) + `"}`), 413, "over the limit"},
		{"oversized log body", "logs", []byte(`{"lease":` + string(lease) + `,"offset":0,"data":"` + strings.Repeat("A", 3<<20) + `"}`), 413, "over the limit"},
		{"log without offset", "logs", []byte(`{"lease":` + string(lease) + `,"data":"aGk="}`), 400, "offset is required"},
		{"log bad base64", "logs", []byte(`{"lease":` + string(lease) + `,"offset":0,"data":"!!"}`), 400, "data"},
		{"log negative offset", "logs", []byte(`{"lease":` + string(lease) + `,"offset":-1,"data":"aGk="}`), 400, "offset must be from 0"},
		{"complete without outcome", "complete", []byte(`{"lease":` + string(lease) + `}`), 400, "outcome is required"},
		{"complete bad outcome", "complete", []byte(`{"lease":` + string(lease) + `,"outcome":"great"}`), 400, "outcome must be"},
		{"artifact bad digest", "artifacts", []byte(`{"lease":` + string(lease) + `,"name":"x","digest":"md5:1","size":1}`), 400, "digest"},
		{"cache restore no keys", "cache/restore", []byte(`{"lease":` + string(lease) + `,"keys":[]}`), 400, "keys"},
	}
	before := e.snapshot()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			s, body := e.post(jobPath(c, tc.route), a.Token, tc.body)
			var v struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(body, &v)
			if s != tc.status || !strings.Contains(v.Error.Message, tc.message) {
				t.Fatalf("got %d %s, want %d with %q", s, body, tc.status, tc.message)
			}
			if want := map[int]string{400: domain.EInvalid, 413: domain.ETooLarge}[tc.status]; v.Error.Code != want {
				t.Fatalf("code %q, want %q", v.Error.Code, want)
			}
		})
	}
	e.t = t
	if e.snapshot() != before {
		t.Fatal("bad input changed the database")
	}
	// Claim and register are not job-scoped but refuse bad input the same way.
	if s, body := e.post("/v1/runner/claim", a.Token, []byte(`{"wait_seconds": 99}`)); s != 400 {
		t.Fatalf("claim wait 99: %d %s", s, body)
	}
	if s, body := e.post("/v1/runner/claim", a.Token, []byte(`{"labels": ["gpu"]}`)); s != 400 || !bytes.Contains(body, []byte("not registered")) {
		t.Fatalf("claim with unregistered label: %d %s", s, body)
	}
	if s, body := e.post("/v1/runners/register", "", []byte(`{"registration_token": "frg_nope", "name": "x"}`)); s != 401 {
		t.Fatalf("register with bad token: %d %s", s, body)
	}
	if s, body := e.post("/v1/runner/claim", "", []byte(`{}`)); s != 401 {
		t.Fatalf("claim without token: %d %s", s, body)
	}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/nowhere", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("unknown route: %v %v", resp, err)
	}
	resp.Body.Close()
	if e.snapshot() != before {
		t.Fatal("bad input changed the database")
	}
}

// TestLogAppend: appends only at the end, identical resends are no-ops,
// anything else is 416 with next_offset, and the per-job limit is 413.
func TestLogAppend(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("a")
	e.createRun("build")
	c := e.claim(a)
	appendAt := func(off int, data string) (int, []byte) {
		return e.post(jobPath(c, "logs"), a.Token, leaseBody(c.Lease, map[string]any{"offset": off, "data": []byte(data)}))
	}
	next := func(body []byte) int64 {
		var v struct {
			NextOffset int64 `json:"next_offset"`
		}
		_ = json.Unmarshal(body, &v)
		return v.NextOffset
	}
	if s, b := appendAt(0, "hello "); s != 200 || next(b) != 6 {
		t.Fatalf("first append: %d %s", s, b)
	}
	if s, b := appendAt(6, "world\n"); s != 200 || next(b) != 12 {
		t.Fatalf("second append: %d %s", s, b)
	}
	before := e.snapshot()
	if s, b := appendAt(6, "world\n"); s != 200 || next(b) != 12 {
		t.Fatalf("identical resend: %d %s", s, b)
	}
	if s, b := appendAt(3, "lo wo"); s != 200 || next(b) != 12 {
		t.Fatalf("resend of a stored range across chunks: %d %s", s, b)
	}
	for _, bad := range []struct {
		off  int
		data string
	}{{6, "WORLD\n"}, {20, "gap"}, {10, "d\nmore"}, {0, "HELLO "}} {
		if s, b := appendAt(bad.off, bad.data); s != 416 || errCode(b) != domain.EOffsetMismatch || next(b) != 12 {
			t.Fatalf("append %q at %d: %d %s", bad.data, bad.off, s, b)
		}
	}
	if e.snapshot() != before {
		t.Fatal("no-op or rejected appends changed the database")
	}
	big := strings.Repeat("x", 600<<10)
	if s, b := appendAt(12, big); s != 200 {
		t.Fatalf("big append: %d %s", s, b)
	}
	before = e.snapshot()
	if s, b := appendAt(12+len(big), big); s != 413 || errCode(b) != domain.ETooLarge || !strings.Contains(string(b), "limit") {
		t.Fatalf("append over the job limit: %d %s", s, b)
	}
	if e.snapshot() != before {
		t.Fatal("413 changed the database")
	}
}

// TestRegistration: a registration token registers exactly one runner.
func TestRegistration(t *testing.T) {
	e := setup(t)
	reg, _, err := e.store.CreateRegistrationToken(context.Background(), time.Minute, "", store.Scope{Untrusted: true})
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"registration_token": reg, "name": "office-box", "labels": []string{"linux", "x64"}}
	s, b := e.post("/v1/runners/register", "", body)
	if s != 201 || !strings.HasPrefix(str(b, "token"), "frt_") {
		t.Fatalf("register: %d %s", s, b)
	}
	if s, b := e.post("/v1/runners/register", "", body); s != 401 {
		t.Fatalf("second use of the token: %d %s", s, b)
	}
	expired, _, _ := e.store.CreateRegistrationToken(context.Background(), time.Second, "", store.Scope{Untrusted: true})
	e.exec(`UPDATE registration_tokens SET expires_at = now() - interval '1 second' WHERE used_at IS NULL`)
	body["registration_token"] = expired
	if s, b := e.post("/v1/runners/register", "", body); s != 401 {
		t.Fatalf("expired token: %d %s", s, b)
	}
	var n int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM runners`).Scan(&n)
	if n != 1 {
		t.Fatalf("%d runners, want 1", n)
	}
	var hash []byte
	_ = e.pool.QueryRow(context.Background(), `SELECT token_hash FROM runners`).Scan(&hash)
	if bytes.Contains(hash, []byte(str(b, "token"))) || len(hash) != 32 {
		t.Fatal("runner token is not stored as a hash")
	}
}

// TestLabelMatching: a runner only gets jobs whose labels it covers.
func TestLabelMatching(t *testing.T) {
	e := setup(t)
	linux := e.registerRunner("linux", "linux")
	both := e.registerRunner("both", "linux", "gpu")
	_, err := e.store.CreateRun(context.Background(), store.NewRun{Project: "acme/app", Jobs: []store.NewJob{
		{Name: "train", Labels: []string{"linux", "gpu"}},
		{Name: "lint", Labels: []string{"linux"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c := e.claim(linux); c.Job.Name != "lint" {
		t.Fatalf("linux runner got %s", c.Job.Name)
	}
	if s, _ := e.post("/v1/runner/claim", linux.Token, map[string]any{}); s != 204 {
		t.Fatalf("linux runner claimed a gpu job: %d", s)
	}
	if c := e.claim(both); c.Job.Name != "train" {
		t.Fatalf("gpu runner got %s", c.Job.Name)
	}
}

// TestClaimLongPoll: a waiting claim returns the job queued during its wait,
// and a claim with nothing to do waits about wait_seconds then says 204.
func TestClaimLongPoll(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("a")
	start := time.Now()
	if s, _ := e.post("/v1/runner/claim", a.Token, map[string]any{"wait_seconds": 1}); s != 204 {
		t.Fatalf("empty claim: %d", s)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("claim returned after %v, before its wait", d)
	}
	got := make(chan protocol.Claim, 1)
	go func() {
		s, body := e.post("/v1/runner/claim", a.Token, map[string]any{"wait_seconds": 10})
		var c protocol.Claim
		if s == 200 {
			_ = json.Unmarshal(body, &c)
		}
		got <- c
	}()
	time.Sleep(200 * time.Millisecond)
	run := e.createRun("late")
	select {
	case c := <-got:
		if c.Job.ID != run.JobIDs["late"] {
			t.Fatalf("long poll got %+v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not return the job queued during its wait")
	}
}
