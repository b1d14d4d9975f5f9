package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestApprovalBesideANewRun: an author's run made while another of their
// runs is being approved never stays waiting: it is made after the
// approval and does not wait, or before it and is released with it.
func TestApprovalBesideANewRun(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	run := func(actor string) (store.Run, error) {
		return s.CreateRun(ctx, store.NewRun{Project: "p", Untrusted: true, Actor: actor, Trigger: "fork",
			Jobs: []store.NewJob{{Name: "a"}}})
	}
	for i := range 30 {
		actor := fmt.Sprintf("github:%d", 1000+i)
		first, err := run(actor)
		if err != nil || first.Approval != store.ApprovalPending {
			t.Fatalf("the author's first run: %+v %v", first, err)
		}
		var second store.Run
		var runErr, approveErr error
		var wg sync.WaitGroup
		wg.Go(func() { second, runErr = run(actor) })
		wg.Go(func() { _, approveErr = s.Approve(ctx, root, first.ID) })
		wg.Wait()
		if runErr != nil || approveErr != nil {
			t.Fatalf("round %d: %v %v", i, runErr, approveErr)
		}
		if got, err := s.GetRun(ctx, second.ID); err != nil || got.Approval == store.ApprovalPending {
			t.Fatalf("round %d: the run made beside the approval still waits: %+v %v", i, got.Approval, err)
		}
	}
}
