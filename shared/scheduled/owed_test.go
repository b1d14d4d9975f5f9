package scheduled_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// expiredRetry claims the fixture's job and one with a retry on a lost
// lease, and waits for both leases to expire; it returns the second's run.
func (f fixture) expiredRetry(t *testing.T) store.Run {
	t.Helper()
	ctx := context.Background()
	run, err := f.st.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{
		{Name: "b", RetryLeaseLost: 1, Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if c, err := f.st.Claim(ctx, f.runner, nil, 0); err != nil || c == nil {
			t.Fatalf("claim: %v %v", c, err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var expired bool
		if err := f.st.Pool().QueryRow(ctx, `SELECT bool_and(lease_expires_at < now()) FROM jobs`).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		if expired {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatal("the leases did not expire")
		}
	}
}

// container is another process over the fixture's database, its board
// on obj (lost: every write lost).
func (f fixture) container(obj wake.Objects, lost bool) *store.Store {
	st := store.New(f.st.Pool(), store.Limits{LeaseTTL: 2 * time.Second})
	b := wake.New(obj, 250*time.Millisecond)
	b.SetTiming(2*time.Second, 500*time.Millisecond, time.Second)
	if lost {
		b.Drop = func(string) bool { return true }
	}
	st.SetBoard(b)
	return st
}

func sweepPass(st *store.Store) (bool, error) {
	w := &scheduled.Sweeper{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return scheduled.Run(context.Background(), st, wake.Sweep, w.Pass)
}

func (f fixture) queueHint(t *testing.T) string {
	t.Helper()
	body, err := f.obj.GetNote(context.Background(), "hints/queue", 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func (f fixture) jobState(t *testing.T, runID string) string {
	t.Helper()
	var state string
	if err := f.st.Pool().QueryRow(context.Background(), `SELECT state FROM jobs WHERE run_id = $1`, runID).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}

// A sweeper pass re-queues a job whose lease was lost (its retry policy)
// in a container whose S3 writes are all lost: it owes the queue hint, in
// PostgreSQL, and fails. The next pass, in another container, writes the
// hint, so that idle runners look; a debt in the first container's memory
// was lost with it.
func TestOwedNotesOutliveTheContainer(t *testing.T) {
	f := newFixture(t)
	run := f.expiredRetry(t)
	before := f.queueHint(t)
	if ran, err := sweepPass(f.container(f.obj, true)); !ran || err == nil {
		t.Fatalf("the pass that could not note its work: ran %v, err %v", ran, err)
	}
	if state := f.jobState(t, run.ID); state != "QUEUED" {
		t.Fatalf("the retried job is %s", state)
	}
	if f.queueHint(t) != before {
		t.Fatal("the first container's hint write was not lost")
	}
	if ran, err := sweepPass(f.container(f.obj, false)); !ran || err != nil {
		t.Fatalf("the next pass: ran %v, err %v", ran, err)
	}
	if f.queueHint(t) == before {
		t.Fatal("the queue hint owed was not written: idle runners do not look for the retried job")
	}
	var owed int
	if err := f.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM wake_owed`).Scan(&owed); err != nil || owed != 0 {
		t.Fatalf("%d notes still owed (%v)", owed, err)
	}
}

// slowObjects answers every note write late.
type slowObjects struct {
	wake.Objects
	by time.Duration
}

func (s slowObjects) PutNote(ctx context.Context, key string, body []byte) error {
	time.Sleep(s.by)
	return s.Objects.PutNote(ctx, key, body)
}

// A pass whose notes are written, but too slowly to cover its commit,
// still re-queues the job (a lease must end whatever S3 does), owing the
// notes, which it makes again after.
func TestSlowHintsInAPassAreOwed(t *testing.T) {
	f := newFixture(t)
	run := f.expiredRetry(t)
	before := f.queueHint(t)
	if ran, err := sweepPass(f.container(slowObjects{f.obj, 450 * time.Millisecond}, false)); !ran || err != nil {
		t.Fatalf("the pass with slow hints: ran %v, err %v", ran, err)
	}
	if state := f.jobState(t, run.ID); state != "QUEUED" {
		t.Fatalf("the retried job is %s after a pass with slow hints", state)
	}
	if f.queueHint(t) == before {
		t.Fatal("the queue hint was not written")
	}
}

// A pass whose commit is slow (past its notes' cover) still re-queues
// the job: a lease must end whatever the database's pace, and the
// commit is not cut short (which would roll it back); its work is noted
// again after it.
func TestSlowCommitInAPassEndsTheLease(t *testing.T) {
	f := newFixture(t)
	run := f.expiredRetry(t)
	if _, err := f.st.Pool().Exec(context.Background(), `
		CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.6); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()`); err != nil {
		t.Fatal(err)
	}
	if ran, err := sweepPass(f.container(f.obj, false)); !ran || err != nil {
		t.Fatalf("the pass with a slow commit: ran %v, err %v", ran, err)
	}
	if state := f.jobState(t, run.ID); state != "QUEUED" {
		t.Fatalf("the retried job is %s after a pass with a slow commit", state)
	}
}
