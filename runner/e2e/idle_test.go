package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/infra/costs"
)

// TestIdleStack: a stack whose four runner slots (two real runner
// processes) wait for work, with the sweeper every 300 ms, does no database
// work and holds no connection; a job submitted then is picked up at once.
func TestIdleStack(t *testing.T) {
	s := start(t)
	first := s.runner
	s.startRunnerN(2)
	ctx := context.Background()
	// Work first: every hint and note exists and was consumed since.
	id, err := s.submit(writePipeline(t, "jobs:\n  warm:\n    runs-on: linux\n    steps: [{run: echo warm}]\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	s.waitRun(id, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)

	db, err := pgx.Connect(ctx, s.vals["FORGECI_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	// The passes the work left (the collector's next minute tick, the
	// queue hint settling) end within about a minute; then ten seconds in
	// a row with nothing, and ten more.
	deadline := time.Now().Add(100 * time.Second)
	for n := 0; n < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the stack never went ten seconds without a database session")
		}
		// The cost table prices the database paused from what this holds.
		if activity(t, db, 10*time.Second) <= int64(costs.Measured.IdleDBSessions) {
			n++
		} else if n > 0 {
			t.Fatal("an idle stack did database work after ten quiet seconds")
		}
	}
	if n := connections(t, db); n != 0 {
		t.Fatalf("an idle stack holds %d connections", n)
	}
	if !alive(s.runner.Process.Pid) {
		t.Fatal("the runner died while idle (the test proves nothing)")
	}

	// A job after the quiet is picked up by a held poll, woken when it is
	// queued.
	start := time.Now()
	id, err = s.submit(writePipeline(t, "jobs:\n  after:\n    runs-on: linux\n    steps: [{run: echo picked up}]\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	s.waitRun(id, func(v runView) bool { return v.State == "PASSED" }, 15*time.Second)
	t.Logf("submit to PASSED after the quiet: %s", time.Since(start).Round(time.Millisecond))

	// The counts see work: an older runner's long poll (no queue_hint)
	// asks the database about every 0.4 s.
	before, sessions := xactCount(t, db), sessionCount(t, db)
	req, _ := http.NewRequest("POST", s.vals["FORGECI_URL"]+"/v1/runner/claim",
		strings.NewReader(`{"wait_seconds": 3}`))
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("long poll: %v %v", err, resp)
	}
	resp.Body.Close()
	time.Sleep(1500 * time.Millisecond)
	if n := xactCount(t, db) - before - 1; n < 3 {
		t.Fatalf("a long poll of 3 s made %d transactions: the count sees nothing", n)
	}
	if sessionCount(t, db)-sessions+int64(connections(t, db)) == 0 {
		t.Fatal("a long poll opened no session and holds none: the session count sees nothing")
	}

	// Ephemeral runners, as a scaled-out machine runs them: one that finds
	// no job ends after --max-idle; one that gets a job runs it and ends.
	for _, c := range []*exec.Cmd{first, s.runner} {
		_ = c.Process.Signal(syscall.SIGTERM)
		_, _ = c.Process.Wait()
	}
	idle := s.ephemeral(t, "2s")
	if err := waitExit(idle, 30*time.Second); err != nil {
		t.Fatalf("an ephemeral runner with no job did not end after --max-idle: %v", err)
	}
	busy := s.ephemeral(t, "60s")
	id, err = s.submit(writePipeline(t, "jobs:\n  one:\n    runs-on: linux\n    steps: [{run: echo ephemeral}]\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	s.waitRun(id, func(v runView) bool { return v.State == "PASSED" }, 30*time.Second)
	if err := waitExit(busy, 30*time.Second); err != nil {
		t.Fatalf("an ephemeral runner did not end after its job: %v", err)
	}
}

// ephemeral starts `forgeci-runner run --ephemeral --max-idle maxIdle`.
func (s *stack) ephemeral(t *testing.T, maxIdle string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "forgeci-runner"), "run", "--server", s.vals["FORGECI_URL"],
		"--token-file", filepath.Join(s.dir, "runner.token"), "--work-dir", s.workDir(), "--concurrency", "1",
		"--ephemeral", "--max-idle", maxIdle, "--kill-grace", "1s")
	logf, _ := os.OpenFile(filepath.Join(s.dir, "runner.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// waitExit waits for cmd to end by itself, successfully, within d.
func waitExit(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("still running after %s", d)
	}
}

// xacts is how many transactions the stack committed or rolled back in
// the next d, not counting this measurement's own.
// activity is what the stack's clients did with the database over d:
// sessions opened, and client connections (but db) open as it began.
// Any work needs one. Transactions would count autovacuum's too, which
// come on their own (an untouched database counts about eight a minute).
func activity(t *testing.T, db *pgx.Conn, d time.Duration) int64 {
	t.Helper()
	before, held := sessionCount(t, db), connections(t, db)
	time.Sleep(d)
	// Backends report their counts when idle, within a second.
	time.Sleep(1500 * time.Millisecond)
	return sessionCount(t, db) - before + int64(held)
}

func sessionCount(t *testing.T, db *pgx.Conn) int64 {
	t.Helper()
	var n int64
	err := db.QueryRow(context.Background(), `SELECT sessions FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

const xactSQL = `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`

func xactCount(t *testing.T, db *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), xactSQL).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// connections counts the client connections to the stack's database but
// this one.
func connections(t *testing.T, db *pgx.Conn) int {
	t.Helper()
	var n int
	err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
