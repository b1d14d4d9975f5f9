package store_test

import (
	"context"
	"testing"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestUntrustedOnlyRunner: a runner registered for untrusted work only
// claims an untrusted run's job and never a trusted one's (which would
// bring its secrets to a machine that runs forks), is not counted among
// the trusted job's runners in the queue, and says so in the runner list.
func TestUntrustedOnlyRunner(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "a")
	admin, _, err := s.CreateUser(ctx, "root", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	forksOnly := scopedRunner(t, s, store.Scope{UntrustedOnly: true})
	var trusted, untrusted string
	for _, nr := range []store.NewRun{{Project: "a"}, {Project: "a", Untrusted: true, Actor: "x"}} {
		nr.Jobs = []store.NewJob{{Name: "j"}}
		run, err := s.CreateRun(ctx, nr)
		if err != nil {
			t.Fatal(err)
		}
		if !nr.Untrusted {
			trusted = run.ID
			continue
		}
		untrusted = run.ID
		s.Pool().Exec(ctx, `UPDATE runs SET approval = 'approved', approval_by = 't', approval_at = now() WHERE id = $1`, run.ID)
		s.Pool().Exec(ctx, `UPDATE jobs SET state = 'QUEUED', queued_at = now(), reason = NULL WHERE run_id = $1`, run.ID)
	}
	q, err := s.Queue(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range q {
		if want := map[string]int{trusted: 0, untrusted: 1}[j.RunID]; j.Eligible != want {
			t.Errorf("queue: run %s's job has %d runners that could take it, want %d", j.RunID, j.Eligible, want)
		}
	}
	for i, want := range []string{untrusted, ""} {
		c, err := s.Claim(ctx, forksOnly, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := ""; c != nil {
			got = c.Lease.RunID
			if got != want {
				t.Fatalf("claim %d: run %s, want %q (the trusted run is %s)", i+1, got, want, trusted)
			}
		} else if want != "" {
			t.Fatalf("claim %d: nothing, want the untrusted run's job", i+1)
		}
	}
	rs, _, err := s.ListRunners(ctx, store.Page{Limit: 10})
	if err != nil || len(rs) != 1 || !rs[0].Untrusted || !rs[0].UntrustedOnly {
		t.Fatalf("runner list %+v %v, want untrusted and untrusted_only", rs, err)
	}
}
