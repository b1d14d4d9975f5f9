package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/infra/costs"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

const testSettle = 1500 * time.Millisecond

// setupIdle is setup with wake-up hints, their times shortened.
func setupIdle(t *testing.T) *env {
	e := setup(t)
	b := wake.New(e.cas, 200*time.Millisecond)
	b.SetTiming(testSettle, 400*time.Millisecond, 500*time.Millisecond)
	e.store.SetBoard(b)
	return e
}

type pollAnswer struct {
	status      int
	hint, after string
	body        []byte
}

func (e *env) idlePoll(token, hint string) pollAnswer {
	e.t.Helper()
	raw, _ := json.Marshal(map[string]any{"wait_seconds": 0, "queue_hint": hint})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+protocol.PathClaim, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return pollAnswer{resp.StatusCode, resp.Header.Get(protocol.HeaderQueueHint), resp.Header.Get(protocol.HeaderPollAfter), body}
}

// xactsOf counts the test database's transactions while fn runs.
func (e *env) xactsOf(fn func()) int64 {
	e.t.Helper()
	before := e.xacts()
	fn()
	return e.xacts() - before
}

// xacts is the test database's committed and rolled back transactions,
// read from another database, so that reading them counts none: a
// backend reports its counts when it ends, so the pool's are ended and
// waited for, however busy the machine (a fixed wait let a loaded CI run
// count earlier transactions in a later window).
func (e *env) xacts() int64 {
	e.t.Helper()
	ctx := context.Background()
	e.pool.Reset()
	admin, err := pgx.Connect(ctx, os.Getenv("FORGECI_TEST_PG"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer admin.Close(ctx)
	db := e.pool.Config().ConnConfig.Database
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var left int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&left); err != nil {
			e.t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d sessions of the test database did not end", left)
		}
	}
	var n int64
	if err := admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, db).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func TestIdlePollsSkipTheDatabase(t *testing.T) {
	e := setupIdle(t)
	r := e.registerRunner("idle")
	// First poll: no hint yet; it is written, but not settled, so the
	// runner gets none and looks again next time.
	a := e.idlePoll(r.Token, "")
	if a.status != http.StatusNoContent || a.hint != "" || a.after != "2" {
		t.Fatalf("first poll: %+v", a)
	}
	time.Sleep(testSettle + wake.Skew)
	a = e.idlePoll(r.Token, "")
	if a.status != http.StatusNoContent || a.hint == "" {
		t.Fatalf("poll after the hint settled: %+v", a)
	}
	hint := a.hint

	// Transactions of five idle polls, against the count's own (nothing
	// between two counts) and five polls without a hint (a long poll of
	// the database, as older runners make). The counts are the database's:
	// autovacuum's transactions would count too (a fresh-clone CI run saw
	// four more in one window), so it is off for this database's tables.
	e.exec(`DO $$ DECLARE t regclass; BEGIN
	    FOR t IN SELECT c.oid FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace LOOP
	        EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', t);
	    END LOOP; END $$`)
	// Autovacuum of the system catalogs (which the statement above just
	// churned) cannot be turned off per database and counts too, now and
	// then (a fresh-clone CI run saw four in one window): the idle window
	// is measured up to three times, and one clean window is enough.
	var own, idle int64
	for range 3 {
		own = e.xactsOf(func() {})
		idle = e.xactsOf(func() {
			for range 5 {
				if a := e.idlePoll(r.Token, hint); a.status != http.StatusNoContent || a.hint != hint {
					t.Fatalf("idle poll: %+v", a)
				}
			}
		})
		if idle == own {
			break
		}
	}
	old := e.xactsOf(func() {
		for range 5 {
			if status, body := e.post(protocol.PathClaim, r.Token, map[string]any{"wait_seconds": 0}); status != http.StatusNoContent {
				t.Fatalf("poll without a hint: %d %s", status, body)
			}
		}
	})
	if idle != own || old < own+5 {
		t.Fatalf("transactions: %d for five idle polls, %d for five polls without a hint, %d for none", idle, old, own)
	}

	// A job queued since: the very next poll, with the old hint, looks
	// and takes it.
	run := e.createRun("build")
	a = e.idlePoll(r.Token, hint)
	if a.status != http.StatusOK || !strings.Contains(string(a.body), run.ID) {
		t.Fatalf("poll after a job was queued: %+v %s", a, a.body)
	}
	// Another runner with the old hint is not told the job went: it looks.
	r2 := e.registerRunner("idle2")
	if a := e.idlePoll(r2.Token, hint); a.status != http.StatusNoContent || a.hint != "" {
		t.Fatalf("second runner: %+v", a)
	}

	// A token with no verdict is checked in the database, whatever hint it
	// sends.
	time.Sleep(testSettle + wake.Skew)
	hint = e.idlePoll(r.Token, "").hint
	if a := e.idlePoll("frt_forged", hint); a.status != http.StatusUnauthorized {
		t.Fatalf("a forged token on the idle path: %+v", a)
	}
	// A revoked runner is refused at once here (this process dropped its
	// verdict; others believe theirs for wake.VerdictCache at most).
	if err := e.store.RevokeRunner(context.Background(), r.ID); err != nil {
		t.Fatal(err)
	}
	if a := e.idlePoll(r.Token, hint); a.status != http.StatusUnauthorized {
		t.Fatalf("a revoked runner's idle poll: %+v", a)
	}
	if a := e.idlePoll(r2.Token, strings.Repeat("x", 65)); a.status != http.StatusBadRequest {
		t.Fatalf("an overlong hint: %+v", a)
	}
}

// countingObjects counts the hints' S3 requests.
type countingObjects struct {
	wake.Objects
	puts, gets atomic.Int64
}

func (c *countingObjects) PutNote(ctx context.Context, key string, body []byte) error {
	c.puts.Add(1)
	return c.Objects.PutNote(ctx, key, body)
}

func (c *countingObjects) GetNote(ctx context.Context, key string, max int64) ([]byte, error) {
	c.gets.Add(1)
	return c.Objects.GetNote(ctx, key, max)
}

// One slot polling every FORGECI_IDLE_POLL_SECONDS (20) makes
// costs.Measured.IdlePollReads S3 GETs a poll and no PUT: the cost table's
// figure.
func TestIdlePollS3Requests(t *testing.T) {
	e := setup(t)
	objects := &countingObjects{Objects: e.cas}
	b := wake.New(objects, time.Minute)
	now := time.Now()
	b.SetClock(func() time.Time { return now })
	e.store.SetBoard(b)
	r := e.registerRunner("idle")
	e.idlePoll(r.Token, "")
	now = now.Add(wake.QueueSettle + wake.Skew)
	hint := e.idlePoll(r.Token, "").hint
	if hint == "" {
		t.Fatal("no hint")
	}
	objects.puts.Store(0)
	objects.gets.Store(0)
	const polls = 30
	for range polls {
		now = now.Add(20 * time.Second)
		if a := e.idlePoll(r.Token, hint); a.status != http.StatusNoContent || a.hint != hint {
			t.Fatalf("idle poll: %+v", a)
		}
	}
	reads := float64(objects.gets.Load()) / polls
	if math.Abs(reads-costs.Measured.IdlePollReads) > 0.01 || objects.puts.Load() != int64(costs.Measured.IdlePollWrites) {
		t.Fatalf("an idle poll made %.2f GETs and %d PUTs in all (costs.Measured: %.2f, %d)", reads, objects.puts.Load(),
			costs.Measured.IdlePollReads, costs.Measured.IdlePollWrites)
	}
}

// A scan that passes over a queued job another transaction holds (a
// cancel, a group step, another claim) gives no hint to rest on: when that
// transaction rolls back, the job is taken at the next poll.
func TestIdlePollAfterSkippedJob(t *testing.T) {
	e := setupIdle(t)
	r := e.registerRunner("r")
	run := e.createRun("j")
	ctx := context.Background()
	lock, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `SELECT 1 FROM jobs WHERE run_id = $1 FOR UPDATE`, run.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testSettle + wake.Skew) // the token settles
	a := e.idlePoll(r.Token, "")
	if a.status != http.StatusNoContent || a.hint != "" {
		t.Fatalf("a scan that passed over a held job: %+v", a)
	}
	_ = lock.Rollback(ctx)
	if a := e.idlePoll(r.Token, a.hint); a.status != http.StatusOK {
		t.Fatalf("the job was not taken once let go: %+v", a)
	}
}

// revokingObjects revokes the runner just before its verdict is written,
// as a revocation that commits while the poll scans; with failWrite the
// verdict's write lands but reports an error (a read-back that failed).
type revokingObjects struct {
	wake.Objects
	revoke    func()
	failWrite bool
}

func (o *revokingObjects) PutNote(ctx context.Context, key string, body []byte) error {
	if !strings.HasPrefix(key, "hints/runners/") || o.revoke == nil {
		return o.Objects.PutNote(ctx, key, body)
	}
	o.revoke()
	o.revoke = nil
	if err := o.Objects.PutNote(ctx, key, body); err != nil || !o.failWrite {
		return err
	}
	return errors.New("the read-back timed out")
}

// A runner revoked while its idle poll scans the queue (the revocation's
// deletions find no verdict yet) gets 401, and no verdict of it is left,
// even when the verdict's write reported an error though it landed: else
// its polls would get 204 for the verdict's life, a day.
func TestRevocationBeforeTheVerdict(t *testing.T) {
	for _, failWrite := range []bool{false, true} {
		t.Run(fmt.Sprintf("write fails %v", failWrite), func(t *testing.T) {
			e := setup(t)
			objects := &revokingObjects{Objects: e.cas, failWrite: failWrite}
			b := wake.New(objects, 200*time.Millisecond)
			b.SetTiming(testSettle, 400*time.Millisecond, 500*time.Millisecond)
			e.store.SetBoard(b)
			r := e.registerRunner("idle")
			objects.revoke = func() {
				if err := e.store.RevokeRunner(context.Background(), r.ID); err != nil {
					t.Error(err)
				}
			}
			if a := e.idlePoll(r.Token, ""); a.status != http.StatusUnauthorized {
				t.Fatalf("the revoked runner's poll: %+v", a)
			}
			if objects.revoke != nil {
				t.Fatal("no verdict was written")
			}
			keys, err := e.cas.ListNotes(context.Background(), "hints/runners/", 10)
			if err != nil || len(keys) != 0 {
				t.Fatalf("verdicts left: %v %v", keys, err)
			}
		})
	}
}

// TestLateCommitWakesIdleRunners: a write that queues a job and whose
// commit ends past its note's cover (the server takes two seconds to
// commit) changes the queue hint again after it: a runner that scanned
// while the commit was in flight, and rests on the hint it got then, is
// not told forever that nothing was queued. The write itself succeeds.
func TestLateCommitWakesIdleRunners(t *testing.T) {
	e := setupIdle(t)
	ctx := context.Background()
	b := e.store.Board()
	var ahead atomic.Int64 // the board's clock runs ahead of the real one by this
	b.SetClock(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) })
	settle := func() { ahead.Add(int64(testSettle + wake.Skew)) }
	r := e.registerRunner("idle")
	e.idlePoll(r.Token, "") // the first hint
	settle()
	h0 := e.idlePoll(r.Token, "").hint
	if h0 == "" {
		t.Fatal("no settled hint")
	}
	e.exec(`CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$`)
	e.exec(`CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()`)
	done := make(chan error, 1)
	go func() {
		_, err := e.store.CreateRun(ctx, store.NewRun{Project: "acme/app", Jobs: []store.NewJob{{Name: "build",
			Spec: domain.JobSpec{Steps: []domain.Step{{Name: "s", Run: "true"}}}}}})
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var committing bool
		if err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND query ILIKE 'commit%' AND wait_event = 'PgSleep')`).Scan(&committing); err != nil {
			t.Fatal(err)
		}
		if committing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never began to commit")
		}
	}
	settle() // the run's hint settles while its commit is still in flight
	during := e.idlePoll(r.Token, h0)
	if during.status != http.StatusNoContent || during.hint == "" {
		t.Fatalf("the poll during the commit: %d %q (the commit landed too soon to test)", during.status, during.hint)
	}
	if err := <-done; err != nil {
		t.Fatalf("a slow commit failed the write: %v", err)
	}
	e.exec(`DROP TRIGGER slow ON jobs`)
	settle()
	if a := e.idlePoll(r.Token, during.hint); a.status != http.StatusOK {
		t.Fatalf("the job committed late was not offered to the runner resting on the hint of its commit: %d", a.status)
	}
}
