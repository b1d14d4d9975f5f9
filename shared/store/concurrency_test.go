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
	return pipelineRun(t, s, store.NewRun{Project: "p", GitRef: ref, Trigger: "github:push " + ref}, file)
}

// pipelineRun makes nr a run of the pipeline's jobs, facts and group.
func pipelineRun(t *testing.T, s *store.Store, nr store.NewRun, file string) store.Run {
	t.Helper()
	pl, err := pipeline.Parse("f.yml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	nr.Jobs, nr.Workflow, nr.Concurrency, nr.RunName = pl.Jobs, pl.WorkflowName(), pl.Concurrency, pl.RunName
	run, err := s.CreateRun(context.Background(), nr)
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

// forkRun makes an untrusted run of the pipeline for actor, as a fork's
// pull request.
func forkRun(t *testing.T, s *store.Store, actor, file string) store.Run {
	t.Helper()
	return pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/pull/9/head", Untrusted: true,
		Actor: actor, Trigger: "github:pull_request #9 from fork evil/x"}, file)
}

// TestConcurrencyTiers: an untrusted run's group is its own ref's (a fork
// names it in a pipeline its author wrote): it never cancels, supersedes
// or holds up a trusted run, or another pull request's, whatever it
// names.
func TestConcurrencyTiers(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	trusted := "concurrency: deploy-prod\njobs:\n  a: {steps: [{run: deploy}]}\n"
	first := groupRun(t, s, "refs/heads/main", trusted)
	l := claimAll(t, s, r)["a"].Lease
	waiting := groupRun(t, s, "refs/heads/main", trusted)
	fork := forkRun(t, s, "github:666", "concurrency: {group: DEPLOY-PROD, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n")
	if _, cancel, err := s.Heartbeat(ctx, r.ID, l.JobID, l); err != nil || cancel {
		t.Fatalf("the trusted run's job was asked to stop by a fork's run: %v %v", cancel, err)
	}
	if got := runState(t, s, waiting.ID); got.State != domain.RunPending || !got.ConcurrencyWaiting {
		t.Fatalf("the trusted waiting run after the fork's: %+v", got)
	}
	if got := runState(t, s, fork.ID); got.ConcurrencyGroup != "untrusted:refs/pull/9/head:deploy-prod" || got.ConcurrencyWaiting {
		t.Fatalf("the fork's run: %+v", got)
	}
	if _, err := s.Complete(ctx, r.ID, l.JobID, l, domain.OutcomePassed, 0); err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, waiting.ID); got.ConcurrencyWaiting || runState(t, s, first.ID).State != domain.RunPassed {
		t.Fatalf("the trusted waiting run was not released: %+v", got)
	}
	// Nor another pull request's: a fork's run of #10 naming the same
	// group cancels nothing of #9's; #9's next run cancels its own.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO approved_actors (project_id, actor, approved_by, run_id)
		SELECT id, 'github:666', 'root', NULL FROM projects WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	fork = forkRun(t, s, "github:666", "concurrency: {group: DEPLOY-PROD, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n")
	other := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/pull/10/head", Untrusted: true, Actor: "github:666",
		Trigger: "github:pull_request #10 from fork evil/y"}, "concurrency: {group: deploy-prod, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n")
	if got := runState(t, s, fork.ID); got.State == domain.RunCanceled || got.ConcurrencyWaiting {
		t.Fatalf("#9's run after #10's of the same group: %+v", got)
	}
	if got := runState(t, s, other.ID); got.ConcurrencyGroup != "untrusted:refs/pull/10/head:deploy-prod" || got.ConcurrencyWaiting {
		t.Fatalf("#10's run: %+v", got)
	}
	again := forkRun(t, s, "github:666", "concurrency: {group: DEPLOY-PROD, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n")
	if got := runState(t, s, fork.ID).State; got != domain.RunCanceled {
		t.Fatalf("#9's run after #9's next: %s", got)
	}
	if got := runState(t, s, again.ID); got.ConcurrencyWaiting || got.State == domain.RunCanceled {
		t.Fatalf("#9's next run: %+v", got)
	}
	// A retry of a run whose group was made before groups were per ref
	// joins its ref's group.
	if _, err := s.Pool().Exec(ctx, `UPDATE runs SET concurrency_group = 'untrusted:deploy-prod' WHERE id = $1`, fork.ID); err != nil {
		t.Fatal(err)
	}
	retried, err := s.Retry(ctx, pgtest.Admin(t, s, "root"), fork.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, retried.ID).ConcurrencyGroup; got != "untrusted:refs/pull/9/head:deploy-prod" {
		t.Fatalf("the retry of a run of a group made before: %q", got)
	}
}

// TestConcurrencyCancelEndsAtOnce: cancel-in-progress of a run that has
// nothing running (waiting for approval, with an always() job) ends it in
// the new run's transaction, and the new run does not wait for it; a
// run waiting in its group that a user cancels ends, always() jobs too.
func TestConcurrencyCancelEndsAtOnce(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	if _, err := s.Pool().Exec(ctx, `INSERT INTO approved_actors (project_id, actor, approved_by, run_id)
		SELECT id, 'github:777', 'root', NULL FROM projects WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	file := "concurrency: {group: g, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n  b: {needs: a, if: always(), steps: [{run: x}]}\n"
	pending := forkRun(t, s, "github:666", file)
	approved := forkRun(t, s, "github:777", file)
	if got := runState(t, s, pending.ID); got.State != domain.RunCanceled {
		t.Fatalf("the run awaiting approval: %s %v", got.State, states(t, s, pending.ID))
	}
	if got := runState(t, s, approved.ID); got.ConcurrencyWaiting {
		t.Fatalf("the new run waits for a run that has ended: %+v", got)
	}

	r := newRunner(t, s)
	plain := "concurrency: h\njobs:\n  a: {steps: [{run: x}]}\n  b: {needs: a, if: always(), steps: [{run: x}]}\n"
	groupRun(t, s, "refs/heads/main", plain)
	claimAll(t, s, r)
	second := groupRun(t, s, "refs/heads/main", plain)
	if _, _, err := s.Cancel(ctx, pgtest.Admin(t, s, "root"), second.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, second.ID); got.State != domain.RunCanceled {
		t.Fatalf("a canceled waiting run: %s %v", got.State, states(t, s, second.ID))
	}
}
