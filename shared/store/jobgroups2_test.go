package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestJobConcurrencyPrefix: a trusted group may not be named as an
// untrusted run's would be (a name read from an input or an output): the
// job fails saying so, and a fork's job of that name cancels nothing.
func TestJobConcurrencyPrefix(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	if _, err := s.Pool().Exec(ctx, `INSERT INTO approved_actors (project_id, actor, approved_by, run_id)
		SELECT id, 'github:666', 'root', NULL FROM projects WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	trusted := groupRun(t, s, "refs/heads/main", "jobs:\n  a: {concurrency: 'untrusted:deploy', steps: [{run: x}]}\n")
	if st, why := states(t, s, trusted.ID)["a"], reasons(t, s, trusted.ID)["a"]; st != "FAILED" ||
		why != `concurrency.group: is "untrusted:deploy" here: a group may not start with "untrusted:"` {
		t.Fatalf("the trusted job: %s %q", st, why)
	}
	fork := forkRun(t, s, "github:666", "jobs:\n  a: {concurrency: {group: deploy, cancel-in-progress: true}, steps: [{run: x}]}\n")
	if st := states(t, s, fork.ID)["a"]; st != "QUEUED" {
		t.Fatalf("the fork's job: %s", st)
	}
	_, err := s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: "refs/heads/main", Trigger: "github:push",
		Concurrency: &domain.Concurrency{Group: "UNTRUSTED:x"}, Jobs: []store.NewJob{{Name: "a"}}})
	if code := domain.ErrorCode(err); code != domain.EInvalid || !strings.Contains(err.Error(), "may not start with \"untrusted:\"") {
		t.Fatalf("a trusted run in an untrusted group: %v", err)
	}
}

// TestJobConcurrencyAlwaysAfterSupersede: an always() dependant of a
// superseded job joins its own group, which is settled at once.
func TestJobConcurrencyAlwaysAfterSupersede(t *testing.T) {
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	file := "jobs:\n  deploy: {concurrency: g, steps: [{run: x}]}\n" +
		"  notify: {needs: deploy, if: always(), concurrency: h, steps: [{run: x}]}\n"
	first := groupRun(t, s, "refs/heads/main", file)
	claimJob(t, s, r, first.ID, "deploy")
	second := groupRun(t, s, "refs/heads/main", file)
	groupRun(t, s, "refs/heads/main", file) // supersedes second's deploy
	if st := states(t, s, second.ID); st["deploy"] != "CANCELED" || st["notify"] != "QUEUED" {
		t.Fatalf("second's notify (group h is free): %v %v", st, reasons(t, s, second.ID))
	}
}

// TestJobConcurrencyRunCancel: a run's cancel-in-progress that cancels a
// run whose queued job holds a job group releases the job waiting there.
func TestJobConcurrencyRunCancel(t *testing.T) {
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	run1 := groupRun(t, s, "refs/heads/main", "concurrency: {group: ci, cancel-in-progress: true}\njobs:\n  a: {concurrency: g, steps: [{run: x}]}\n")
	if st := states(t, s, run1.ID)["a"]; st != "QUEUED" {
		t.Fatalf("run1's a: %s", st)
	}
	other := groupRun(t, s, "refs/heads/main", "name: other\njobs:\n  a: {concurrency: g, steps: [{run: x}]}\n")
	if st := states(t, s, other.ID)["a"]; st != "PENDING" {
		t.Fatalf("other's a: %s", st)
	}
	groupRun(t, s, "refs/heads/main", "concurrency: {group: ci, cancel-in-progress: true}\njobs:\n  a: {concurrency: g2, steps: [{run: x}]}\n")
	if st := states(t, s, run1.ID)["a"]; st != "CANCELED" {
		t.Fatalf("run1's a: %s", st)
	}
	if st := states(t, s, other.ID)["a"]; st != "QUEUED" {
		t.Fatalf("other's a, group g free: %s %v", st, reasons(t, s, other.ID))
	}
}

// TestJobConcurrencyCancelQueued: cancel-in-progress against a queued,
// unclaimed holder cancels it at once and queues the new job.
func TestJobConcurrencyCancelQueued(t *testing.T) {
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	first := groupRun(t, s, "refs/heads/main", "jobs:\n  a: {concurrency: g, steps: [{run: x}]}\n")
	second := groupRun(t, s, "refs/heads/main", "jobs:\n  a: {concurrency: {group: g, cancel-in-progress: true}, steps: [{run: x}]}\n")
	if st, why := states(t, s, first.ID)["a"], reasons(t, s, first.ID)["a"]; st != "CANCELED" || !strings.Contains(why, "canceled by a of #2") {
		t.Fatalf("first: %s %q", st, why)
	}
	if st := states(t, s, second.ID)["a"]; st != "QUEUED" {
		t.Fatalf("second: %s", st)
	}
}

// TestJobConcurrencyManyWaiting: a matrix of 70 combinations in one group
// leaves one waiting, the others superseded.
func TestJobConcurrencyManyWaiting(t *testing.T) {
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	holder := groupRun(t, s, "refs/heads/main", "jobs:\n  a: {concurrency: g, steps: [{run: x}]}\n")
	claimJob(t, s, r, holder.ID, "a")
	var vals []string
	for i := range 70 {
		vals = append(vals, fmt.Sprint(i))
	}
	run := groupRun(t, s, "refs/heads/main", "jobs:\n  d:\n    strategy: {matrix: {x: ["+strings.Join(vals, ", ")+"]}}\n    concurrency: g\n    steps: [{run: x}]\n")
	n := 0
	for _, st := range states(t, s, run.ID) {
		if st == domain.JobPending {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d jobs still waiting in one group after the run was made (want 1)", n)
	}
}

// TestConcurrencyCancelExpression: cancel-in-progress may be an
// expression, as GitHub's: a run's reads its facts (cancel on branches
// but main), a job's its needs too.
func TestConcurrencyCancelExpression(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := featuredRunner(t, s)
	file := "concurrency: {group: ci, cancel-in-progress: \"${{ github.ref != 'refs/heads/main' }}\"}\njobs:\n  a: {steps: [{run: x}]}\n"
	main := groupRun(t, s, "refs/heads/main", file)
	if got := runState(t, s, main.ID); got.ConcurrencyCancel || got.State != domain.RunPending {
		t.Fatalf("main's run: %+v", got)
	}
	dev := groupRun(t, s, "refs/heads/dev", file)
	if got := runState(t, s, dev.ID); !got.ConcurrencyCancel {
		t.Fatalf("dev's run does not cancel in progress: %+v", got)
	}
	if got := runState(t, s, main.ID); got.State != domain.RunCanceled {
		t.Fatalf("main's run after dev's: %s", got.State)
	}
	complete(t, s, r, claimJob(t, s, r, dev.ID, "a"), domain.OutcomePassed)

	jobs := strings.Replace(deployFile, "CANCEL", `"${{ needs.build.outputs.target == 'Prod' }}"`, 1)
	first := buildDone(t, s, r, jobs)
	d1 := claimJob(t, s, r, first.ID, "deploy")
	buildDone(t, s, r, jobs)
	if _, cancel, err := s.Heartbeat(ctx, r.ID, d1.Lease.JobID, d1.Lease); err != nil || !cancel {
		t.Fatalf("the deploy in progress: cancel %v, %v", cancel, err)
	}
}
