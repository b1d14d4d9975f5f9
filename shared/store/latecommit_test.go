package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// TestUnseenCommitWakesTheSweeper: a run whose commit the control plane
// did not see end (its request gave up; the server committed all the
// same) skips what follows a commit (its job groups settle), so it notes
// the sweeper, whose pass settles them, as well as the queue.
func TestUnseenCommitWakesTheSweeper(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{LeaseTTL: time.Minute})
	obj := castest.New(t)
	b := wake.New(obj, 250*time.Millisecond)
	b.SetTiming(2*time.Second, 500*time.Millisecond, time.Second)
	s.SetBoard(b)
	pgtest.Project(t, s, "p")
	// The server commits a second after its client gave up and asked it
	// to cancel, as a commit whose record is being written does. The
	// commit holds advisory lock 7345 meanwhile (visible outside its
	// transaction), so that the client gives up during the commit, not
	// before it however slow the machine.
	if _, err := s.Pool().Exec(ctx, `
		CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE t0 timestamptz := clock_timestamp();
		BEGIN
			PERFORM pg_advisory_lock(7345);
			LOOP
				BEGIN PERFORM pg_sleep(0.05); EXCEPTION WHEN query_canceled THEN NULL; END;
				EXIT WHEN clock_timestamp() > t0 + interval '1 second';
			END LOOP;
			PERFORM pg_advisory_unlock(7345);
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()`); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			var committing bool
			if s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 7345 AND granted)`).
				Scan(&committing) != nil || committing {
				return
			}
		}
	}()
	if _, err := s.CreateRun(rctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "a",
		Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}}); err == nil {
		t.Fatal("the run's request did not give up during its commit")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never committed the run")
		}
	}
	keys, err := obj.ListNotes(ctx, "hints/due/sweep/", 10)
	if err != nil || len(keys) == 0 {
		t.Fatalf("no note wakes the sweeper after a commit not seen to end: %v %v", keys, err)
	}
}
