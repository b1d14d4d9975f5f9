package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestPushBodiesOutliveDeliveries: the collector deletes finished
// deliveries after 30 days but remembers push bodies for
// store.PushMemory, so a push body recorded again under a new ID is
// refused after its delivery went; a pull request's body is not kept
// (its run is made from GitHub's state at the time, not the payload's).
func TestPushBodiesOutliveDeliveries(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	addRepository(t, s, p.ID)
	record := func(guid, event, body string) bool {
		t.Helper()
		ok, err := s.RecordDelivery(ctx, guid, event, 5, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return ok.New
	}
	if !record("g1", "push", `{"push":1}`) || !record("g2", "pull_request", `{"pr":1}`) {
		t.Fatal("new deliveries were not recorded")
	}
	if record("g3", "push", `{"push":1}`) {
		t.Fatal("a push body recorded twice")
	}
	exec(`UPDATE scm_deliveries SET state = 'DONE', finished_at = now() - interval '31 days'`)
	gc := func(dry bool) store.GCResult {
		t.Helper()
		res, err := s.CollectGarbage(ctx, store.GCOptions{DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if plan := gc(true); plan.Deliveries != 2 || plan.PushBodies != 0 {
		t.Fatalf("dry run: %+v", plan)
	}
	if res := gc(false); res.Deliveries != 2 || res.PushBodies != 0 {
		t.Fatalf("collection: %+v", res)
	}
	if record("g4", "push", `{"push":1}`) {
		t.Fatal("a push body recorded again once its delivery was collected")
	}
	if !record("g5", "pull_request", `{"pr":1}`) {
		t.Fatal("a pull request's body is remembered past its delivery")
	}
	exec(`UPDATE scm_push_bodies SET received_at = now() - $1::interval`, (store.PushMemory + 24*time.Hour).String())
	if plan := gc(true); plan.PushBodies != 1 {
		t.Fatalf("dry run after PushMemory: %+v", plan)
	}
	if res := gc(false); res.PushBodies != 1 {
		t.Fatalf("collection after PushMemory: %+v", res)
	}
	if !record("g6", "push", `{"push":1}`) {
		t.Fatal("a push body forgotten after PushMemory is still refused")
	}
}
