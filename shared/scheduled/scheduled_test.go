package scheduled_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/infra/costs"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

const period = 300 * time.Millisecond

type fixture struct {
	st     *store.Store
	board  *wake.Board
	runner store.Runner
	run    store.Run
	obj    wake.Objects
	// runnerToken is runner's bearer token.
	runnerToken string
}

func newFixture(t *testing.T) fixture { return newFixtureTTL(t, 2*time.Second) }

// newFixtureTTL is newFixture with leases of ttl.
func newFixtureTTL(t *testing.T, ttl time.Duration) fixture {
	t.Helper()
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{LeaseTTL: ttl})
	obj := castest.New(t)
	b := wake.New(obj, 250*time.Millisecond)
	b.SetTiming(2*time.Second, 500*time.Millisecond, time.Second)
	st.SetBoard(b)
	pgtest.Project(t, st, "p")
	reg, _, err := st.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := st.RegisterRunner(ctx, reg, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	runner, err := st.AuthenticateRunner(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	run, err := st.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{
		{Name: "a", Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{st, b, runner, run, obj, token}
}

// claimSwept claims the fixture's job, with the sweeper invoked every
// period.
func (f fixture) claimSwept(t *testing.T) *store.Claim {
	t.Helper()
	c, err := f.st.Claim(context.Background(), f.runner, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	f.sweepEvery(t)
	return c
}

// sweepEvery invokes the sweeper every period, as EventBridge would.
func (f fixture) sweepEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	w := &scheduled.Sweeper{Store: f.st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = scheduled.Run(ctx, f.st, wake.Sweep, w.Pass)
			}
		}
	}()
}

// overdue waits for job's lease to end and returns how long after its
// expiry (both by the database clock) the job stopped RUNNING.
func (f fixture) overdue(t *testing.T, jobID string) time.Duration {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var state string
		var late float64
		err := f.st.Pool().QueryRow(context.Background(), `
            SELECT state, coalesce(extract(epoch FROM finished_at - lease_expires_at), 0) FROM jobs WHERE id = $1`, jobID).Scan(&state, &late)
		if err != nil {
			t.Fatal(err)
		}
		if state != "RUNNING" {
			if state != "ABORTED" {
				t.Fatalf("job ended %s", state)
			}
			return time.Duration(late * float64(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the lease never ended")
	return 0
}

// Every hint write is lost from the moment the runner vanishes, after a
// heartbeat moved its lease past the expiry the sweeper had noted, and
// past the life of that note (its slot + grain + commit delay + skew,
// 1.75 s here): the lease still ends within two sweep periods of its
// expiry, since a pass that cannot note the next expiry keeps its own
// note and runs again.
func TestLostHintWritesStillEndLeases(t *testing.T) {
	f := newFixtureTTL(t, 4*time.Second)
	ctx := context.Background()
	c := f.claimSwept(t)
	time.Sleep(3 * time.Second)                                                            // a pass noted the lease's first expiry, 4 s
	if _, _, err := f.st.Heartbeat(ctx, f.runner.ID, c.Lease.JobID, c.Lease); err != nil { // now 7 s
		t.Fatal(err)
	}
	f.board.Drop = func(string) bool { return true }
	if late := f.overdue(t, c.Lease.JobID); late > 2*period {
		t.Fatalf("the lease ended %s after its expiry (sweep period %s)", late, period)
	} else {
		t.Logf("ended %s after its expiry", late)
	}
}

// Without lost writes, the sweeper wakes for the lease's expiry alone.
func TestSweeperWakesForTheExpiry(t *testing.T) {
	f := newFixture(t)
	c := f.claimSwept(t)
	if late := f.overdue(t, c.Lease.JobID); late > 2*period {
		t.Fatalf("the lease ended %s after its expiry (sweep period %s)", late, period)
	}
}

// The functions' clock 30 s behind the database's: the sweeper still
// wakes for the lease's expiry, noted on its own clock (the database's
// expiry as a span from the database's now), not 30 s late.
func TestSweeperWakesForTheExpiryOnItsOwnClock(t *testing.T) {
	f := newFixture(t)
	f.board.SetClock(func() time.Time { return time.Now().Add(-30 * time.Second) })
	c := f.claimSwept(t)
	if late := f.overdue(t, c.Lease.JobID); late > 2*period {
		t.Fatalf("the lease ended %s after its expiry (sweep period %s)", late, period)
	}
}

// A claim held past its note's cover (a lock) is given up by the client,
// but the server might still commit it: the sweeper is noted for when
// such a lease would expire, so that it is never left unswept.
func TestClaimCutOffNotesItsExpiry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	hold, err := f.st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck
	if _, err := hold.Exec(ctx, `SELECT 1 FROM runners WHERE id = $1 FOR UPDATE`, f.runner.ID); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	if c, err := f.st.Claim(ctx, f.runner, nil, 0); c != nil || err == nil {
		t.Fatalf("a claim held past its cover: %v %v", c, err)
	}
	notes, err := f.board.Notes(ctx, wake.Sweep)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range notes {
		if !n.Before(asked.Add(2*time.Second - f.board.Grain())) {
			return
		}
	}
	t.Fatalf("no sweep note at the expiry of a lease the claim could have made (notes %v, asked at %v)", notes, asked)
}

// A claim whose hint cannot be written takes nothing: no lease exists
// that the sweeper could not learn of.
func TestClaimRefusedWhenItsHintIsLost(t *testing.T) {
	f := newFixture(t)
	// Past the grain of the notes the run's creation wrote (they cover
	// only commits of their grain).
	time.Sleep(f.board.Grain())
	f.board.Drop = func(string) bool { return true }
	c, err := f.st.Claim(context.Background(), f.runner, nil, 0)
	var de *domain.Error
	if c != nil || !errors.As(err, &de) || de.Code != domain.EUnavailable {
		t.Fatalf("claim with lost hints: %v %v", c, err)
	}
	var running int
	if err := f.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE state = 'RUNNING'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running != 0 {
		t.Fatalf("%d jobs RUNNING after a refused claim", running)
	}
}

// counting counts the S3 requests of the hints.
type counting struct {
	wake.Objects
	puts, gets, lists, dels atomic.Int64
}

func (c *counting) PutNote(ctx context.Context, key string, body []byte) error {
	c.puts.Add(1)
	return c.Objects.PutNote(ctx, key, body)
}

func (c *counting) GetNote(ctx context.Context, key string, max int64) ([]byte, error) {
	c.gets.Add(1)
	return c.Objects.GetNote(ctx, key, max)
}

func (c *counting) ListNotes(ctx context.Context, prefix string, max int) ([]string, error) {
	c.lists.Add(1)
	return c.Objects.ListNotes(ctx, prefix, max)
}

func (c *counting) Delete(ctx context.Context, keys []string) error {
	c.dels.Add(1)
	return c.Objects.Delete(ctx, keys)
}

// One job of a one-job run, through three containers as in AWS (the api
// function creates the run, the claim function leases it, the complete
// function ends it), writes costs.Measured.NotesPerJob hints, each read
// back once: the cost table's figure.
func TestHintWritesPerJob(t *testing.T) {
	f := newFixture(t) // made the run with its own board, not counted
	ctx := context.Background()
	objects := &counting{Objects: castest.New(t)}
	container := func() *store.Store {
		st := store.New(f.st.Pool(), store.Limits{LeaseTTL: 2 * time.Second})
		st.SetBoard(wake.New(objects, time.Minute))
		return st
	}
	api, claim, complete := container(), container(), container()
	run, err := api.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{
		{Name: "b", Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's job first, so this run's is the one left.
	for range 2 {
		c, err := claim.Claim(ctx, f.runner, nil, 0)
		if err != nil || c == nil {
			t.Fatalf("claim: %v %v", c, err)
		}
		if _, err := complete.Complete(ctx, f.runner.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0); err != nil {
			t.Fatal(err)
		}
		if c.Lease.RunID == run.ID {
			break
		}
	}
	puts, gets := objects.puts.Load(), objects.gets.Load()
	if puts != int64(costs.Measured.NotesPerJob) || gets != puts {
		t.Fatalf("one job wrote %d hints and read %d (costs.Measured.NotesPerJob = %d)", puts, gets, costs.Measured.NotesPerJob)
	}
}

// A scheduled invocation with nothing due makes costs.Measured's S3
// requests and no database transaction.
func TestIdlePassS3Requests(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	objects := &counting{Objects: castest.New(t)}
	st := store.New(f.st.Pool(), store.Limits{})
	st.SetBoard(wake.New(objects, time.Minute))
	w := &scheduled.Sweeper{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The least of three rounds: a busy machine's stray reports add to a
	// round, a pass that asked the database would add to every one.
	least := int64(1 << 62)
	for range 3 {
		before := xacts(t, f.st)
		own := xacts(t, f.st) - before // what counting costs
		before = xacts(t, f.st)
		for _, kind := range []string{wake.Sweep, wake.SCM, wake.GC} {
			ran, err := scheduled.Run(ctx, st, kind, w.Pass)
			if ran || err != nil {
				t.Fatalf("%s ran (%v) with nothing due: %v", kind, ran, err)
			}
		}
		least = min(least, xacts(t, f.st)-before-own)
	}
	if least > 0 {
		t.Fatalf("idle passes made %d database transactions", least)
	}
	if objects.lists.Load() != 9*int64(costs.Measured.IdlePassLists) || objects.gets.Load() != 9*int64(costs.Measured.IdlePassReads) ||
		objects.puts.Load()+objects.dels.Load() != 0 {
		t.Fatalf("nine idle passes: %d lists, %d gets, %d puts, %d deletes", objects.lists.Load(), objects.gets.Load(),
			objects.puts.Load(), objects.dels.Load())
	}
}

// xacts counts the database's transactions, ending the pool's sessions
// first so that they report theirs; the count's own is taken off.
func xacts(t *testing.T, st *store.Store) int64 {
	t.Helper()
	st.Pool().Reset()
	time.Sleep(500 * time.Millisecond)
	var n int64
	if err := st.Pool().QueryRow(context.Background(), `SELECT xact_commit + xact_rollback FROM pg_stat_database
        WHERE datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUploadEndWakesTheCollector: an upload handed out and never
// committed notes the collector due within the hour after it ends
// (store.UploadLife),
// which then deletes it and frees its room; a collector's pass that finds
// uploads pending says to run again when the oldest ends, so a lost note
// only delays it to that pass's next.
func TestUploadEndWakesTheCollector(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now()
	f.board.SetClock(func() time.Time { return now })
	var projectID string
	if err := f.st.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE name = 'p'`).Scan(&projectID); err != nil {
		t.Fatal(err)
	}
	upload := func(b byte) {
		t.Helper()
		ref := store.BlobRef{ProjectID: projectID, Trusted: true, Digest: "sha256:" + strings.Repeat(string(b), 64)}
		if _, err := f.st.PrepareBlobUpload(ctx, ref, 100); err != nil {
			t.Fatal(err)
		}
	}
	upload('a')
	gc := scheduled.GC(f.st, time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if ran, err := scheduled.Run(ctx, f.st, wake.GC, gc); ran || err != nil {
		t.Fatalf("the collector ran (%v) before the upload ended: %v", ran, err)
	}
	now = now.Add(store.UploadLife + wake.Skew + time.Hour)
	if _, err := f.st.Pool().Exec(ctx, `UPDATE uploads SET created_at = created_at - $1::interval`, (store.UploadLife + time.Minute).String()); err != nil {
		t.Fatal(err)
	}
	if ran, err := scheduled.Run(ctx, f.st, wake.GC, gc); !ran || err != nil {
		t.Fatalf("the collector did not run (%v) when the upload ended: %v", ran, err)
	}
	var left int
	if err := f.st.Pool().QueryRow(ctx, `SELECT count(*) FROM uploads`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d uploads left after the collector's pass (%v)", left, err)
	}
	upload('b')
	// When it ends, on the board's clock (3 hours on): the database's time
	// as a span from its now.
	var in float64
	if err := f.st.Pool().QueryRow(ctx, `SELECT extract(epoch FROM created_at + $1::interval - now())::float8 FROM uploads`,
		store.UploadLife.String()).Scan(&in); err != nil {
		t.Fatal(err)
	}
	ends := now.Add(time.Duration(in * float64(time.Second)))
	next, err := gc(ctx)
	if want := ends.Add(f.board.Grain()); err != nil || next.Sub(want).Abs() > time.Second {
		t.Fatalf("a pass with an upload pending runs next at %v (%v), want a slot after it ends, %v", next, err, want)
	}
}
