package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestUndecidedApprovalsExpire: a run left waiting for approval past the
// approval time (30 days) is rejected by the collector, which names no
// one, and its jobs are CANCELED; a younger one still waits. The dry run
// counts it first.
func TestUndecidedApprovalsExpire(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	waiting := func(actor string) store.Run {
		t.Helper()
		r, err := s.CreateRun(ctx, store.NewRun{Project: "p", Untrusted: true, Actor: actor, Trigger: "fork",
			Jobs: []store.NewJob{{Name: "a"}}})
		if err != nil || r.Approval != store.ApprovalPending {
			t.Fatalf("a fork's run: %+v %v", r, err)
		}
		return r
	}
	old, young := waiting("github:1"), waiting("github:2")
	if _, err := s.Pool().Exec(ctx, `UPDATE runs SET created_at = now() - interval '31 days' WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	if plan, err := s.CollectGarbage(ctx, store.GCOptions{DryRun: true}); err != nil || plan.ApprovalsExpired != 1 {
		t.Fatalf("dry run: %+v %v", plan, err)
	}
	res, err := s.CollectGarbage(ctx, store.GCOptions{})
	if err != nil || res.ApprovalsExpired != 1 {
		t.Fatalf("collection: %+v %v", res, err)
	}
	got, err := s.GetRun(ctx, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := s.Pool().QueryRow(ctx, `SELECT reason FROM jobs WHERE run_id = $1`, old.ID).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if got.Approval != store.ApprovalRejected || got.State != domain.RunCanceled || !strings.Contains(reason, "no decision") {
		t.Fatalf("the undecided run: approval %s, state %s, job's reason %q", got.Approval, got.State, reason)
	}
	if got, err := s.GetRun(ctx, young.ID); err != nil || got.Approval != store.ApprovalPending {
		t.Fatalf("the younger run: %+v %v", got, err)
	}
}
