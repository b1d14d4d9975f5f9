package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// claimAll claims every job that can be claimed now, by name.
func claimAll(t *testing.T, s *store.Store, r store.Runner) map[string]*store.Claim {
	t.Helper()
	out := map[string]*store.Claim{}
	for {
		c, err := s.Claim(context.Background(), r, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			return out
		}
		var name string
		if err := s.Pool().QueryRow(context.Background(), `SELECT name FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&name); err != nil {
			t.Fatal(err)
		}
		out[name] = c
	}
}

func complete(t *testing.T, s *store.Store, r store.Runner, c *store.Claim, outcome domain.Outcome) {
	t.Helper()
	if _, err := s.Complete(context.Background(), r.ID, c.Lease.JobID, c.Lease, outcome, 0); err != nil {
		t.Fatal(err)
	}
}

// TestAdvanceRunDiamond: a failure skips every job downstream of it,
// through several levels and along every path, and nothing else; the run
// stays RUNNING while a job is open and ends FAILED when the last one does.
func TestAdvanceRunDiamond(t *testing.T) {
	ctx := context.Background()
	s, r, run := newRun(t, []store.NewJob{
		{Name: "a"}, {Name: "b"},
		{Name: "c", Needs: []string{"a", "b"}}, {Name: "d", Needs: []string{"c"}}, {Name: "e", Needs: []string{"a"}},
		{Name: "f", Needs: []string{"d", "e"}}, {Name: "g", Needs: []string{"b"}},
	})
	claims := claimAll(t, s, r)
	if len(claims) != 2 || claims["a"] == nil || claims["b"] == nil {
		t.Fatalf("claimed %v, want a and b", claims)
	}
	complete(t, s, r, claims["a"], domain.OutcomeFailed)
	want := map[string]string{"a": "FAILED", "b": "RUNNING", "c": "SKIPPED", "d": "SKIPPED", "e": "SKIPPED", "f": "SKIPPED", "g": "PENDING"}
	if got := states(t, s, run.ID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a failed: %v, want %v", got, want)
	}
	if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunRunning || got.FinishedAt != nil {
		t.Fatalf("run while b runs: %s %v", got.State, got.FinishedAt)
	}
	complete(t, s, r, claims["b"], domain.OutcomePassed)
	g := claimAll(t, s, r)["g"]
	if g == nil {
		t.Fatalf("g was not queued after b passed: %v", states(t, s, run.ID))
	}
	complete(t, s, r, g, domain.OutcomePassed)
	if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunFailed || got.FinishedAt == nil {
		t.Fatalf("run at the end: %s %v", got.State, got.FinishedAt)
	}
}

// TestAdvanceRunConcurrentNeeds: two needs of one job finishing at the same
// moment take turns on the run, so the job is queued, never left PENDING.
// A completion that changes nothing about the run does not write its row.
func TestAdvanceRunConcurrentNeeds(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	for i := range 20 {
		run, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{
			{Name: "a"}, {Name: "b"}, {Name: "other"}, {Name: "c", Needs: []string{"a", "b"}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		claims := claimAll(t, s, r)
		var before, after string
		_ = s.Pool().QueryRow(ctx, `SELECT xmin::text FROM runs WHERE id = $1`, run.ID).Scan(&before)
		var wg sync.WaitGroup
		for _, name := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Complete(ctx, r.ID, claims[name].Lease.JobID, claims[name].Lease, domain.OutcomePassed, 0); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		_ = s.Pool().QueryRow(ctx, `SELECT xmin::text FROM runs WHERE id = $1`, run.ID).Scan(&after)
		if got := states(t, s, run.ID)["c"]; got != "QUEUED" {
			t.Fatalf("round %d: c is %s after both needs passed together", i, got)
		}
		if before != after {
			t.Fatalf("round %d: the run row was rewritten although its state stayed RUNNING", i)
		}
		c := claimAll(t, s, r)["c"]
		complete(t, s, r, c, domain.OutcomePassed)
		complete(t, s, r, claims["other"], domain.OutcomePassed)
		if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunPassed {
			t.Fatalf("round %d: run %s", i, got.State)
		}
	}
}

// TestCancelRacesCompletion: a run canceled while one of its jobs
// completes. The completion locks its job, then the run, then the pending
// jobs it queues or skips; a cancel that took the pending rows before the
// running one closed a cycle, and PostgreSQL aborted one of the two with a
// deadlock. Both must succeed, every round.
func TestCancelRacesCompletion(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	admin := pgtest.Admin(t, s, "root")
	r := newRunner(t, s)
	for round := range 30 {
		// The needed job is listed last, so that its ID (created in
		// order) sorts after its dependants': the order a cancel that
		// locked every row by ID would have taken the pending rows first.
		var jobs []store.NewJob
		for i := range 8 {
			jobs = append(jobs, store.NewJob{Name: fmt.Sprintf("p%d", i), Needs: []string{"a"}})
		}
		jobs = append(jobs, store.NewJob{Name: "a"})
		run, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		claims := claimAll(t, s, r)
		if claims["a"] == nil {
			t.Fatalf("round %d: claimed %v", round, claims)
		}
		var wg sync.WaitGroup
		var completeErr, cancelErr error
		wg.Go(func() {
			_, completeErr = s.Complete(ctx, r.ID, claims["a"].Lease.JobID, claims["a"].Lease, domain.OutcomePassed, 0)
		})
		wg.Go(func() { _, _, cancelErr = s.Cancel(ctx, admin, run.ID, "") })
		wg.Wait()
		if completeErr != nil || cancelErr != nil {
			t.Fatalf("round %d: complete: %v; cancel: %v", round, completeErr, cancelErr)
		}
		var open int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs WHERE run_id = $1 AND state IN ('PENDING', 'QUEUED')`, run.ID).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open != 0 {
			t.Fatalf("round %d: %d jobs left PENDING or QUEUED in a canceled run", round, open)
		}
	}
}
