package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/pglocal"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/schema"
	"github.com/forgeci/forgeci/shared/store"
)

// scheduledPipeline is an hourly schedule at minute (and a job).
func scheduledPipeline(minute int, missed string) string {
	return fmt.Sprintf("on:\n  schedule: [{cron: '%d * * * *', missed: %s}]\njobs:\n  nightly: {steps: [{run: x}]}\n", minute, missed)
}

// runOn makes a run of file on ref, trusted unless said, with its
// pipeline's schedules.
func runOn(t *testing.T, s *store.Store, ref, file string, untrusted bool) store.Run {
	t.Helper()
	pl, err := pipeline.Parse("f.yml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", GitRef: ref, Untrusted: untrusted, Actor: "github:1",
		Jobs: pl.Jobs, Schedules: pl.Schedules(), Concurrency: pl.Concurrency})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func count(t *testing.T, s *store.Store, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSchedulesFollowTheDefaultBranch: a trusted run of the default
// branch makes its pipeline's schedules the project's; another branch's
// run, or an untrusted one, does not; a later default-branch pipeline
// without schedules removes them.
func TestSchedulesFollowTheDefaultBranch(t *testing.T) {
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p") // default branch main
	runOn(t, s, "refs/heads/dev", scheduledPipeline(5, "skip"), false)
	runOn(t, s, "refs/heads/main", scheduledPipeline(6, "skip"), true)
	if n := count(t, s, `SELECT count(*) FROM schedules`); n != 0 {
		t.Fatalf("%d schedules from another branch or an untrusted run", n)
	}
	main := runOn(t, s, "refs/heads/main", scheduledPipeline(7, "run-once"), false)
	if n := count(t, s, `SELECT count(*) FROM schedules WHERE cron = '7 * * * *' AND missed = 'run-once' AND template_run_id = $1`, main.ID); n != 1 {
		t.Fatalf("the default branch's schedule: %d", n)
	}
	// The same cron again keeps its row (and creation time: a slot due
	// meanwhile still fires), with the newer run to fire.
	var created time.Time
	if err := s.Pool().QueryRow(context.Background(), `SELECT created_at FROM schedules`).Scan(&created); err != nil {
		t.Fatal(err)
	}
	again := runOn(t, s, "refs/heads/main", scheduledPipeline(7, "skip"), false)
	if n := count(t, s, `SELECT count(*) FROM schedules WHERE missed = 'skip' AND template_run_id = $1 AND created_at = $2`, again.ID, created); n != 1 {
		t.Fatalf("the same cron again: %d", n)
	}
	runOn(t, s, "refs/heads/main", "jobs:\n  a: {steps: [{run: x}]}\n", false)
	if n := count(t, s, `SELECT count(*) FROM schedules`); n != 0 {
		t.Fatalf("%d schedules after the default branch dropped them", n)
	}
}

// TestScheduleFiresOnce: two schedulers racing fire a due slot once (the
// firing's key, not a hope), as a run of the default branch's snapshot
// and jobs, triggered by the schedule; calling again fires nothing.
func TestScheduleFiresOnce(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	minute := (time.Now().UTC().Minute() + 59) % 60 // the slot a minute ago, not again for an hour
	runOn(t, s, "refs/heads/main", "concurrency: ${{ github.event_name }}-nightly\n"+scheduledPipeline(minute, "skip"), false)
	if _, err := s.Pool().Exec(ctx, `UPDATE schedules SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]store.ScheduleResult, 4)
	for i := range results {
		wg.Go(func() {
			var err error
			if results[i], err = s.FireSchedules(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	fired := 0
	for _, r := range results {
		fired += r.Fired
	}
	if fired != 1 || count(t, s, `SELECT count(*) FROM runs WHERE trigger = $1`, fmt.Sprintf("schedule: %d * * * *", minute)) != 1 {
		t.Fatalf("fired %d (%v)", fired, results)
	}
	if r, err := s.FireSchedules(ctx); err != nil || r.Fired+r.Skipped != 0 {
		t.Fatalf("again: %+v %v", r, err)
	}
	// Out of time, a call fires nothing and says so.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if r, err := s.FireSchedules(done); err == nil || r.Fired != 0 {
		t.Fatalf("a call out of time: %+v %v", r, err)
	}
	// Firings past 30 days go, but never a cron's newest.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO schedule_firings (project_id, cron, slot, fired_at, skipped)
		SELECT project_id, cron, slot - interval '40 days', fired_at - interval '40 days', true FROM schedule_firings`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE schedule_firings SET fired_at = now() - interval '35 days'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FireSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM schedule_firings`); n != 1 {
		t.Fatalf("%d firings kept, want the newest", n)
	}
	if n := count(t, s, `SELECT count(*) FROM jobs j JOIN runs r ON r.id = j.run_id WHERE r.trigger LIKE 'schedule:%' AND j.spec->'run'->>'event_name' = 'schedule'`); n != 1 {
		t.Fatalf("the scheduled run's job reads event_name schedule: %d", n)
	}
	// Its concurrency group is evaluated with its own facts.
	if n := count(t, s, `SELECT count(*) FROM runs WHERE trigger LIKE 'schedule:%' AND concurrency_group = 'schedule-nightly'`); n != 1 {
		t.Fatal("the scheduled run's group is not of its own facts")
	}
}

// TestScheduleMissedSlots: with PostgreSQL's clock moved three hours on
// by libfaketime (the control plane "down" meanwhile), an hourly schedule
// with missed: run-once fires once, not three times; one with missed:
// skip records its newest slot skipped and fires nothing; the next slot
// on time fires.
func TestScheduleMissedSlots(t *testing.T) {
	ctx := context.Background()
	lib := fakeTimeLibrary(t)
	// The server runs as its own user: the clock file is where it can read.
	dir, err := os.MkdirTemp("", "forgeci-clock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	clock := filepath.Join(dir, "faketime")
	setClock := func(offset string) {
		if err := os.WriteFile(clock, []byte(offset+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setClock("+0")
	c, err := pglocal.Start(ctx, pglocal.Options{Fast: true, Env: []string{"LD_PRELOAD=" + lib,
		"FAKETIME_TIMESTAMP_FILE=" + clock, "FAKETIME_NO_CACHE=1", "DONT_FAKE_MONOTONIC=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if _, err := schema.Migrate(ctx, c.URL, nil); err != nil {
		t.Fatal(err)
	}
	pool, err := store.OpenPool(ctx, c.URL, store.PoolOptions{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := store.New(pool, store.Limits{})
	pgtest.Project(t, s, "p")
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	// Slots at the minute ten minutes from now, every hour.
	minute := (now.UTC().Minute() + 10) % 60
	pipelines := map[string]string{"run-once": fmt.Sprintf("%d * * * *", minute), "skip": fmt.Sprintf("%d */1 * * *", minute)}
	pgtestProjectRun(t, s, pipelines)
	setClock("+12000") // 3h20m: three slots passed, the newest ten minutes ago
	var later time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&later); err != nil || later.Sub(now) < 3*time.Hour {
		t.Fatalf("the database's clock did not move: %v then %v (%v)", now, later, err)
	}
	res, err := s.FireSchedules(ctx)
	if err != nil || res.Fired != 1 || res.Skipped != 1 {
		t.Fatalf("after three hours: %+v %v", res, err)
	}
	if n := count(t, s, `SELECT count(*) FROM schedule_firings WHERE cron = $1 AND skipped AND note LIKE 'missed by %'`, pipelines["skip"]); n != 1 {
		t.Fatalf("the skipped slot is not recorded: %d", n)
	}
	setClock("+15060") // 4h11m: the next slot, a minute late: on time
	res, err = s.FireSchedules(ctx)
	if err != nil || res.Fired != 2 {
		t.Fatalf("the next slot: %+v %v", res, err)
	}
	// The hourly slots' next is within the hour on this process's clock,
	// not the database's (4h11m ahead): it is where the sweeper's wake note
	// is written.
	if wait := time.Until(res.Next); wait <= 0 || wait > time.Hour {
		t.Fatalf("next slot %v, %s away on this clock: want within the hour", res.Next, wait)
	}
}

// pgtestProjectRun makes a trusted main run whose pipeline has a
// schedule for each missed policy.
func pgtestProjectRun(t *testing.T, s *store.Store, crons map[string]string) {
	t.Helper()
	file := fmt.Sprintf("on:\n  schedule: [{cron: '%s', missed: run-once}, {cron: '%s', missed: skip}]\njobs:\n  a: {steps: [{run: x}]}\n",
		crons["run-once"], crons["skip"])
	pl, err := pipeline.Parse("f.yml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", GitRef: "refs/heads/main", Actor: "github:1",
		Jobs: pl.Jobs, Schedules: pl.Schedules(), Concurrency: pl.Concurrency}); err != nil {
		t.Fatal(err)
	}
}

// fakeTimeLibrary finds Debian's libfaketime.
func fakeTimeLibrary(t *testing.T) string {
	for _, pattern := range []string{"/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	t.Fatal("libfaketime not found: install Debian's faketime package (make deps does)")
	return ""
}

// TestScheduleAuthorRevoked: a schedule fires a member's run again only
// while they, and the member who submitted its snapshot (bob's manual run
// of alice's), may still start it: once alice lost the secrets
// permission, its slot is recorded skipped, saying why, and nothing runs.
func TestScheduleAuthorRevoked(t *testing.T) {
	for _, runOfBob := range []bool{false, true} {
		t.Run(map[bool]string{false: "alice's run", true: "bob's run of alice's snapshot"}[runOfBob], func(t *testing.T) {
			testScheduleAuthorRevoked(t, runOfBob)
		})
	}
}

func testScheduleAuthorRevoked(t *testing.T, runOfBob bool) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	ids := map[string]string{}
	for _, name := range []string{"alice", "bob"} {
		if _, _, err := s.CreateUser(ctx, name, store.RoleUser); err != nil {
			t.Fatal(err)
		}
		m, err := s.SetMember(ctx, root, p.ID, name, store.RoleWrite, true)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = "user:" + m.UserID
	}
	minute := (time.Now().UTC().Minute() + 59) % 60
	pl, err := pipeline.Parse("f.yml", []byte(scheduledPipeline(minute, "run-once")))
	if err != nil {
		t.Fatal(err)
	}
	nr := store.NewRun{Project: "p", GitRef: "refs/heads/main", Actor: ids["alice"],
		Jobs: pl.Jobs, Schedules: pl.Schedules(), Concurrency: pl.Concurrency}
	if runOfBob {
		nr.Actor, nr.SourceBy = ids["bob"], ids["alice"]
	}
	if _, err := s.CreateRun(ctx, nr); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE schedules SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMember(ctx, root, p.ID, "alice", store.RoleWrite, false); err != nil {
		t.Fatal(err)
	}
	res, err := s.FireSchedules(ctx)
	if err != nil || res.Fired != 0 || res.Skipped != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if n := count(t, s, `SELECT count(*) FROM schedule_firings WHERE skipped AND note LIKE '%no longer has the secrets permission%'`); n != 1 {
		t.Fatal("the skipped slot does not say why")
	}
}
