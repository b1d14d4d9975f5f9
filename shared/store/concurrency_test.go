package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// groupRun makes a run of the pipeline in project p on ref.
func groupRun(t *testing.T, s *store.Store, ref, file string) store.Run {
	t.Helper()
	pl, err := pipeline.Parse("f.yml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", GitRef: ref, Trigger: "github:push " + ref,
		Jobs: pl.Jobs, Workflow: pl.WorkflowName(), Concurrency: pl.Concurrency})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func runState(t *testing.T, s *store.Store, id string) store.Run {
	t.Helper()
	r, err := s.GetRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConcurrencyGroups: as GitHub's, a group has one run in progress and
// one waiting: a newer run supersedes the waiting one, waits while the
// group's run is in progress, and goes on when it ends. Groups ignore
// case and are per project and per value.
func TestConcurrencyGroups(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	file := "name: CI\nconcurrency: ${{ github.workflow }}-${{ github.ref_name }}\njobs:\n  a: {steps: [{run: x}]}\n"
	first := groupRun(t, s, "refs/heads/main", file)
	c1 := claimAll(t, s, r)["a"].Lease
	second := groupRun(t, s, "refs/heads/main", strings.Replace(file, "CI", "ci", 1)) // the same group, other case
	other := groupRun(t, s, "refs/heads/dev", file)
	if got := runState(t, s, second.ID); !got.ConcurrencyWaiting || got.ConcurrencyGroup != "ci-main" || got.State != domain.RunPending {
		t.Fatalf("second: %+v", got)
	}
	if got := runState(t, s, other.ID); got.ConcurrencyWaiting {
		t.Fatalf("a run of another group waits: %+v", got)
	}
	third := groupRun(t, s, "refs/heads/main", file)
	if got := runState(t, s, second.ID); got.State != domain.RunCanceled {
		t.Fatalf("second after third: %s", got.State)
	}
	if why := reasons(t, s, second.ID)["a"]; why != fmt.Sprintf("superseded by #%d", third.Number) {
		t.Fatalf("second's job: %q", why)
	}
	// Only other's job is claimable while first runs.
	if c := claimAll(t, s, r); len(c) != 1 || c["a"].Lease.RunID != other.ID {
		t.Fatalf("claimed %v while the group's run was in progress", c)
	}
	if _, err := s.Complete(ctx, r.ID, c1.JobID, c1, domain.OutcomePassed, 0); err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, first.ID); got.State != domain.RunPassed {
		t.Fatalf("first: %s", got.State)
	}
	if got := runState(t, s, third.ID); got.ConcurrencyWaiting {
		t.Fatalf("third still waits after first ended: %+v", got)
	}
	if c := claimAll(t, s, r); len(c) != 1 || c["a"].Lease.RunID != third.ID {
		t.Fatalf("claimed %v, want third's job", c)
	}
}

// TestConcurrencyCancelInProgress: with cancel-in-progress a new run
// cancels the group's run through the fenced cancel path: its runner
// hears cancel_requested, and once its lease ends its late writes are
// refused; the new run goes on when it has ended.
func TestConcurrencyCancelInProgress(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	file := "concurrency: {group: deploy, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n  b: {needs: a, steps: [{run: x}]}\n"
	first := groupRun(t, s, "refs/heads/main", file)
	l := claimAll(t, s, r)["a"].Lease
	second := groupRun(t, s, "refs/heads/main", file)
	if _, cancel, err := s.Heartbeat(ctx, r.ID, l.JobID, l); err != nil || !cancel {
		t.Fatalf("heartbeat of the canceled run: cancel %v, %v", cancel, err)
	}
	if got := runState(t, s, second.ID); !got.ConcurrencyWaiting {
		t.Fatalf("second goes on while first's job still runs: %+v", got)
	}
	if _, err := s.Complete(ctx, r.ID, l.JobID, l, domain.OutcomeCanceled, 0); err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, first.ID); got.State != domain.RunCanceled {
		t.Fatalf("first: %s", got.State)
	}
	if why := reasons(t, s, first.ID)["b"]; why != fmt.Sprintf("canceled by #%d (concurrency group deploy)", second.Number) {
		t.Fatalf("first's waiting job: %q", why)
	}
	_, err := s.AppendLog(ctx, r.ID, l.JobID, l, 0, []byte("late"))
	if code := domain.ErrorCode(err); code != domain.EJobFinished {
		t.Fatalf("a late write of the canceled run: %v", errors.Unwrap(err))
	}
	if got := runState(t, s, second.ID); got.ConcurrencyWaiting {
		t.Fatalf("second still waits: %+v", got)
	}
	if c := claimAll(t, s, r); c["a"] == nil || c["a"].Lease.RunID != second.ID {
		t.Fatalf("claimed %v", c)
	}
}

// TestConcurrencyReleasedBySweeper: a group whose run ended without
// releasing the waiting one (the process ended in between) is released
// by the next sweep.
func TestConcurrencyReleasedBySweeper(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	file := "concurrency: g\njobs:\n  a: {steps: [{run: x}]}\n"
	first := groupRun(t, s, "refs/heads/main", file)
	second := groupRun(t, s, "refs/heads/main", file)
	// The end of first, without the release that follows it.
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'PASSED', finished_at = now() WHERE run_id = $1`, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE runs SET state = 'PASSED', finished_at = now() WHERE id = $1`, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, second.ID); got.ConcurrencyWaiting || states(t, s, second.ID)["a"] != "QUEUED" {
		t.Fatalf("second after a sweep: %+v %v", got, states(t, s, second.ID))
	}
}
