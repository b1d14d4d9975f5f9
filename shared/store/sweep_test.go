package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

func newRunner(t *testing.T, s *store.Store, labels ...string) store.Runner {
	t.Helper()
	return scopedRunner(t, s, store.Scope{Untrusted: true}, labels...)
}

// newRun makes a store with project p, an untrusted runner and a run of
// jobs in p.
func newRun(t *testing.T, jobs []store.NewJob) (*store.Store, store.Runner, store.Run) {
	t.Helper()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	run, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	return s, r, run
}

// scopedRunner registers a runner with a token of the given scope.
func scopedRunner(t *testing.T, s *store.Store, scope store.Scope, labels ...string) store.Runner {
	t.Helper()
	ctx := context.Background()
	reg, _, err := s.CreateRegistrationToken(ctx, time.Minute, "", scope)
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := s.RegisterRunner(ctx, reg, "r", labels)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.AuthenticateRunner(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func states(t *testing.T, s *store.Store, runID string) map[string]string {
	t.Helper()
	return jobColumn(t, s, runID, "state")
}

// jobColumn is each job of the run's value of column (as text), by name.
func jobColumn(t *testing.T, s *store.Store, runID, column string) map[string]string {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT name, coalesce(`+column+`::text, '') FROM jobs WHERE run_id = $1`, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, v string
		_ = rows.Scan(&n, &v)
		out[n] = v
	}
	return out
}

func expire(t *testing.T, s *store.Store, jobID string) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(),
		`UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, jobID); err != nil {
		t.Fatal(err)
	}
}

// TestSweepAbortsAndSkips: an expired lease makes the job ABORTED (reason
// lease_expired), closes its attempt, skips its dependants transitively and
// ends the run ABORTED. Sweeping again changes nothing.
func TestSweepAbortsAndSkips(t *testing.T) {
	ctx := context.Background()
	s, r, run := newRun(t, []store.NewJob{{Name: "build"}, {Name: "test", Needs: []string{"build"}}, {Name: "deploy", Needs: []string{"test"}}})
	if got := states(t, s, run.ID); got["build"] != "QUEUED" || got["test"] != "PENDING" {
		t.Fatalf("initial states %v", got)
	}
	c, err := s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	// Not yet expired: the sweeper leaves it alone.
	if res, err := s.Sweep(ctx); err != nil || res.Aborted != 0 {
		t.Fatalf("early sweep: %+v %v", res, err)
	}
	expire(t, s, c.Lease.JobID)
	if res, err := s.Sweep(ctx); err != nil || res.Aborted != 1 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	want := map[string]string{"build": "ABORTED", "test": "SKIPPED", "deploy": "SKIPPED"}
	if got := states(t, s, run.ID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("states %v, want %v", got, want)
	}
	got, _ := s.GetRun(ctx, run.ID)
	if got.State != domain.RunAborted || got.FinishedAt == nil {
		t.Fatalf("run %+v", got)
	}
	if res, err := s.Sweep(ctx); err != nil || res.Aborted+res.Requeued != 0 {
		t.Fatalf("second sweep did something: %+v %v", res, err)
	}
	var outcome, reason string
	_ = s.Pool().QueryRow(ctx, `SELECT outcome, reason FROM job_attempts WHERE job_id = $1`, c.Lease.JobID).Scan(&outcome, &reason)
	if outcome != "ABORTED" || reason != domain.ReasonLeaseExpired {
		t.Fatalf("attempt %s %s", outcome, reason)
	}
}

// TestSweepConcurrent: several sweepers at once, racing late heartbeats and
// completions from the runners, leave every job in exactly one terminal
// state with exactly one closed attempt.
func TestSweepConcurrent(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	const n = 200
	nr := store.NewRun{Project: "p"}
	for i := range n {
		nr.Jobs = append(nr.Jobs, store.NewJob{Name: fmt.Sprintf("j%d", i)})
	}
	if _, err := s.CreateRun(ctx, nr); err != nil {
		t.Fatal(err)
	}
	var claims []*store.Claim
	for range n {
		c, err := s.Claim(ctx, r, nil, 0)
		if err != nil || c == nil {
			t.Fatal(err)
		}
		claims = append(claims, c)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var aborted, completed int
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Sweep(ctx)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			aborted += res.Aborted
			mu.Unlock()
		}()
	}
	for _, c := range claims {
		wg.Add(1)
		go func(c *store.Claim) {
			defer wg.Done()
			_, err := s.Complete(ctx, r.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0)
			if err == nil {
				mu.Lock()
				completed++
				mu.Unlock()
			} else if code := domain.ErrorCode(err); code != domain.ELeaseExpired && code != domain.EJobFinished {
				t.Errorf("late completion: %v", err)
			}
		}(c)
	}
	wg.Wait()
	if completed != 0 {
		t.Fatalf("%d completions of expired leases were accepted", completed)
	}
	if aborted != n {
		t.Fatalf("sweepers aborted %d jobs, want %d", aborted, n)
	}
	var bad int
	_ = s.Pool().QueryRow(ctx, `
		SELECT count(*) FROM jobs j
		WHERE j.state <> 'ABORTED'
		   OR (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id AND a.outcome = 'ABORTED') <> 1`).Scan(&bad)
	if bad != 0 {
		t.Fatalf("%d jobs not aborted exactly once", bad)
	}
}

// TestRunOrchestration: passing needs queue dependants; the run follows.
func TestRunOrchestration(t *testing.T) {
	ctx := context.Background()
	s, r, run := newRun(t, []store.NewJob{{Name: "a"}, {Name: "b"}, {Name: "c", Needs: []string{"a", "b"}}})
	if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunPending {
		t.Fatalf("new run is %s", got.State)
	}
	c1, _ := s.Claim(ctx, r, nil, 0)
	c2, _ := s.Claim(ctx, r, nil, 0)
	if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunRunning {
		t.Fatalf("run with a claimed job is %s", got.State)
	}
	// Both needs finish at the same moment: c must still be queued once.
	var wg sync.WaitGroup
	for _, c := range []*store.Claim{c1, c2} {
		wg.Add(1)
		go func(c *store.Claim) {
			defer wg.Done()
			if _, err := s.Complete(ctx, r.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0); err != nil {
				t.Error(err)
			}
		}(c)
	}
	wg.Wait()
	if got := states(t, s, run.ID)["c"]; got != "QUEUED" {
		t.Fatalf("c is %s after both needs passed", got)
	}
	c3, _ := s.Claim(ctx, r, nil, 0)
	if _, err := s.Complete(ctx, r.ID, c3.Lease.JobID, c3.Lease, domain.OutcomeFailed, 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunFailed {
		t.Fatalf("run is %s, want FAILED", got.State)
	}
}

// TestRetryFailed: retry.failed re-queues a failed job as a new generation,
// once per allowed retry, then lets it fail.
func TestRetryFailed(t *testing.T) {
	ctx := context.Background()
	s, r, run := newRun(t, []store.NewJob{{Name: "flaky", RetryFailed: 1}})
	c1, _ := s.Claim(ctx, r, nil, 0)
	res, err := s.Complete(ctx, r.ID, c1.Lease.JobID, c1.Lease, domain.OutcomeFailed, 1)
	if err != nil || res.State != domain.JobFailed || res.JobState != domain.JobQueued {
		t.Fatalf("first failure: %+v %v", res, err)
	}
	c2, _ := s.Claim(ctx, r, nil, 0)
	if c2 == nil || c2.Lease.Generation != 2 {
		t.Fatalf("retry claim: %+v", c2)
	}
	if _, _, err := s.Heartbeat(ctx, r.ID, c1.Lease.JobID, c1.Lease); domain.ErrorCode(err) != domain.ELeaseMismatch {
		t.Fatalf("generation 1 heartbeat after retry: %v", err)
	}
	res, err = s.Complete(ctx, r.ID, c2.Lease.JobID, c2.Lease, domain.OutcomeFailed, 1)
	if err != nil || res.JobState != domain.JobFailed {
		t.Fatalf("second failure: %+v %v", res, err)
	}
	if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunFailed {
		t.Fatalf("run %s", got.State)
	}
}

// TestCreateRunValidation: cycles, unknown needs and duplicates are refused.
func TestCreateRunValidation(t *testing.T) {
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	for name, jobs := range map[string][]store.NewJob{
		"cycle":     {{Name: "a", Needs: []string{"b"}}, {Name: "b", Needs: []string{"a"}}},
		"self":      {{Name: "a", Needs: []string{"a"}}},
		"unknown":   {{Name: "a", Needs: []string{"zz"}}},
		"duplicate": {{Name: "a"}, {Name: "a"}},
		"empty":     {},
	} {
		if _, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", Jobs: jobs}); domain.ErrorCode(err) != domain.EInvalid {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestRunnerScope: a runner claims only jobs its registration token scoped
// it to: its projects (none named: all), and untrusted work only if it
// takes it.
func TestRunnerScope(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "a")
	pgtest.Project(t, s, "b")
	scoped := func(scope store.Scope) store.Runner { return scopedRunner(t, s, scope) }
	if _, _, err := s.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Projects: []string{"nope"}}); err == nil {
		t.Fatal("a token scoped to a project that does not exist")
	}
	onlyA, anyTrusted, forks := scoped(store.Scope{Projects: []string{"a"}}), scoped(store.Scope{}), scoped(store.Scope{Untrusted: true})
	for _, nr := range []store.NewRun{{Project: "b"}, {Project: "a", Untrusted: true, Actor: "x"}, {Project: "a"}} {
		nr.Jobs = []store.NewJob{{Name: "j"}}
		run, err := s.CreateRun(ctx, nr)
		if err != nil {
			t.Fatal(err)
		}
		if nr.Untrusted {
			s.Pool().Exec(ctx, `UPDATE runs SET approval = 'approved', approval_by = 't', approval_at = now() WHERE id = $1`, run.ID)
			s.Pool().Exec(ctx, `UPDATE jobs SET state = 'QUEUED', queued_at = now(), reason = NULL WHERE run_id = $1`, run.ID)
		}
	}
	project := func(c *store.Claim) string {
		var name string
		_ = s.Pool().QueryRow(ctx, `SELECT p.name || CASE WHEN r.trusted THEN '' ELSE ' (untrusted)' END
			FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1`, c.Lease.RunID).Scan(&name)
		return name
	}
	claim := func(r store.Runner) string {
		c, err := s.Claim(ctx, r, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			return "nothing"
		}
		return project(c)
	}
	if got := claim(onlyA); got != "a" {
		t.Fatalf("a runner of project a claimed %s", got)
	}
	if got := claim(onlyA); got != "nothing" {
		t.Fatalf("a runner of project a, trusted work only, claimed %s", got)
	}
	if got := claim(anyTrusted); got != "b" {
		t.Fatalf("a runner of every project, trusted work only, claimed %s", got)
	}
	if got := claim(anyTrusted); got != "nothing" {
		t.Fatalf("a runner taking no untrusted work claimed %s", got)
	}
	if got := claim(forks); got != "a (untrusted)" {
		t.Fatalf("a runner taking untrusted work claimed %s", got)
	}
}

// TestSweepWaitsForHeldRow: a late runner call holding an expired job's
// row (it will be refused, and ends nothing) does not make the sweep pass
// the job over: the sweep waits for the row and ends the job itself.
func TestSweepWaitsForHeldRow(t *testing.T) {
	ctx := context.Background()
	s, r, _ := newRun(t, []store.NewJob{{Name: "build"}})
	c, err := s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	expire(t, s, c.Lease.JobID)
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, c.Lease.JobID); err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	go func() {
		defer close(held)
		time.Sleep(300 * time.Millisecond) // the late call's own work
		_ = tx.Rollback(ctx)
	}()
	res, err := s.Sweep(ctx)
	<-held
	if err != nil || res.Aborted != 1 {
		t.Fatalf("sweep beside a held row: %+v %v", res, err)
	}
}

// TestSweepGivesUpOnARowHeldTooLong: a row held past the sweep's wait
// makes the sweep say so and finish the rest (the other expired job ends);
// it does not hang, and the held job ends at the next sweep.
func TestSweepGivesUpOnARowHeldTooLong(t *testing.T) {
	ctx := context.Background()
	s, r, _ := newRun(t, []store.NewJob{{Name: "a"}, {Name: "b"}})
	var claims []*store.Claim
	for range 2 {
		c, err := s.Claim(ctx, r, nil, 0)
		if err != nil || c == nil {
			t.Fatalf("claim: %v %v", c, err)
		}
		expire(t, s, c.Lease.JobID)
		claims = append(claims, c)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, claims[0].Lease.JobID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := s.Sweep(ctx)
	if err == nil || res.Aborted != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("sweep beside a row held too long: %+v %v after %s", res, err, time.Since(start))
	}
	_ = tx.Rollback(ctx)
	if res, err := s.Sweep(ctx); err != nil || res.Aborted != 1 {
		t.Fatalf("next sweep: %+v %v", res, err)
	}
}
