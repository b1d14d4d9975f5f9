package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// deployFile is a pipeline whose deploy job, after build, is in a group
// named from the ref and from build's output.
const deployFile = `jobs:
  build: {steps: [{id: a, run: x}], outputs: {target: '${{ steps.a.outputs.t }}'}}
  deploy:
    needs: build
    concurrency: {group: 'deploy-${{ needs.build.outputs.target }}-${{ github.ref_name }}', cancel-in-progress: CANCEL}
    steps: [{run: x}]
`

// featuredRunner is a runner of s that declares every feature.
func featuredRunner(t *testing.T, s *store.Store) store.Runner {
	r := newRunner(t, s)
	r.Features = []string{domain.FeatureExpressions, domain.FeatureOutputs, domain.FeatureSteps}
	return r
}

// groupStore is a store with project p and a runner of every feature.
func groupStore(t *testing.T) (*store.Store, store.Runner) {
	t.Helper()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	return s, featuredRunner(t, s)
}

// claimJob claims the one job of run runID the runner can take now, by
// name, failing if it is not there.
func claimJob(t *testing.T, s *store.Store, r store.Runner, runID, name string) *store.Claim {
	t.Helper()
	for _, c := range claimAll(t, s, r) {
		if c.Lease.RunID == runID {
			if got := jobColumn(t, s, runID, "id")[name]; got == c.Lease.JobID {
				return c
			}
		}
		t.Fatalf("claimed job %s of run %s, want %s of %s", c.Lease.JobID, c.Lease.RunID, name, runID)
	}
	t.Fatalf("nothing to claim, want %s of run %s (states %v, reasons %v)", name, runID, states(t, s, runID), reasons(t, s, runID))
	return nil
}

// buildDone runs a new run's build job to PASSED with output target.
func buildDone(t *testing.T, s *store.Store, r store.Runner, file string) store.Run {
	t.Helper()
	ctx := context.Background()
	run := groupRun(t, s, "refs/heads/main", file)
	c := claimJob(t, s, r, run.ID, "build")
	if err := s.SetOutputs(ctx, r.ID, c.Lease.JobID, c.Lease, map[string]string{"target": "Prod"}); err != nil {
		t.Fatal(err)
	}
	complete(t, s, r, c, domain.OutcomePassed)
	return run
}

func withCancel(cancel string) string {
	return strings.Replace(deployFile, "CANCEL", cancel, 1)
}

// TestJobConcurrencyGroups: as GitHub's, a job group holds one job in
// progress and one waiting, across runs: a job joins its group when its
// needs end (its group read from their outputs), waits while the group's
// job is in progress, a newer one supersedes it, and the end of the job
// in progress lets the newest go on.
func TestJobConcurrencyGroups(t *testing.T) {
	s, r := groupStore(t)
	file := withCancel("false")
	first := buildDone(t, s, r, file)
	d1 := claimJob(t, s, r, first.ID, "deploy")
	second := buildDone(t, s, r, file)
	if st, why := states(t, s, second.ID)["deploy"], reasons(t, s, second.ID)["deploy"]; st != "PENDING" || why != "waiting for concurrency group deploy-prod-main" {
		t.Fatalf("second's deploy: %s %q", st, why)
	}
	third := buildDone(t, s, r, file)
	if st, why := states(t, s, second.ID)["deploy"], reasons(t, s, second.ID)["deploy"]; st != "CANCELED" || why != "superseded by deploy of #3" {
		t.Fatalf("second's deploy after third's: %s %q", st, why)
	}
	if got := runState(t, s, second.ID).State; got != domain.RunCanceled {
		t.Fatalf("second: %s", got)
	}
	if c := claimAll(t, s, r); len(c) != 0 {
		t.Fatalf("claimed %v while the group's job runs", c)
	}
	complete(t, s, r, d1, domain.OutcomePassed)
	d3 := claimJob(t, s, r, third.ID, "deploy")
	complete(t, s, r, d3, domain.OutcomePassed)
	if got := runState(t, s, third.ID).State; got != domain.RunPassed {
		t.Fatalf("third: %s", got)
	}
}

// TestJobConcurrencyCancelInProgress: a job with cancel-in-progress
// cancels the group's job in progress through the fenced cancel: its
// runner hears cancel_requested, its late writes are refused once it has
// ended, and the new job goes on then.
func TestJobConcurrencyCancelInProgress(t *testing.T) {
	ctx := context.Background()
	s, r := groupStore(t)
	file := withCancel("true")
	first := buildDone(t, s, r, file)
	d1 := claimJob(t, s, r, first.ID, "deploy")
	second := buildDone(t, s, r, file)
	if _, cancel, err := s.Heartbeat(ctx, r.ID, d1.Lease.JobID, d1.Lease); err != nil || !cancel {
		t.Fatalf("heartbeat of the job in progress: cancel %v, %v", cancel, err)
	}
	if st := states(t, s, second.ID)["deploy"]; st != "PENDING" {
		t.Fatalf("second's deploy goes on while first's runs: %s", st)
	}
	complete(t, s, r, d1, domain.OutcomeCanceled)
	_, err := s.AppendLog(ctx, r.ID, d1.Lease.JobID, d1.Lease, 0, []byte("late"))
	if code := domain.ErrorCode(err); code != domain.EJobFinished {
		t.Fatalf("a late write of the canceled job: %v", errors.Unwrap(err))
	}
	claimJob(t, s, r, second.ID, "deploy")

	// A job of the group only queued is canceled at once.
	third := buildDone(t, s, r, withCancel("false"))
	fourth := buildDone(t, s, r, file)
	if st, why := states(t, s, third.ID)["deploy"], reasons(t, s, third.ID)["deploy"]; st != "CANCELED" || why != "superseded by deploy of #4" {
		t.Fatalf("third's waiting deploy after fourth's: %s %q", st, why)
	}
	if st := states(t, s, fourth.ID)["deploy"]; st != "PENDING" {
		t.Fatalf("fourth's deploy: %s", st)
	}
}

// TestJobConcurrencyMatrix: each combination of a matrix joins the group
// its values name, and groups apart do not hold each other up; an
// untrusted run's groups are its own: it cancels nothing of a trusted
// run's, whatever it names.
func TestJobConcurrencyMatrix(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	if _, err := s.Pool().Exec(ctx, `INSERT INTO approved_actors (project_id, actor, approved_by, run_id)
		SELECT id, 'github:666', 'root', NULL FROM projects WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	r := featuredRunner(t, s)
	file := `jobs:
  deploy:
    strategy: {matrix: {env: [staging, production]}}
    concurrency: {group: 'deploy-${{ matrix.env }}', cancel-in-progress: CANCEL}
    steps: [{run: x}]
`
	first := groupRun(t, s, "refs/heads/main", strings.Replace(file, "CANCEL", "false", 1))
	claims := claimAll(t, s, r)
	if len(claims) != 2 {
		t.Fatalf("claimed %d of two groups' jobs", len(claims))
	}
	second := groupRun(t, s, "refs/heads/main", strings.Replace(file, "CANCEL", "false", 1))
	if got := reasons(t, s, second.ID); got["deploy (staging)"] != "waiting for concurrency group deploy-staging" ||
		got["deploy (production)"] != "waiting for concurrency group deploy-production" {
		t.Fatalf("second's jobs: %v", got)
	}
	fork := forkRun(t, s, "github:666", strings.Replace(file, "CANCEL", "true", 1))
	for name, c := range claims {
		if _, cancel, err := s.Heartbeat(ctx, r.ID, c.Lease.JobID, c.Lease); err != nil || cancel {
			t.Fatalf("trusted %s was asked to stop by a fork's job: %v %v", name, cancel, err)
		}
	}
	if got := states(t, s, fork.ID); got["deploy (staging)"] != "QUEUED" {
		t.Fatalf("the fork's jobs: %v %v", got, reasons(t, s, fork.ID))
	}
	if got := jobColumn(t, s, fork.ID, "concurrency_group")["deploy (staging)"]; got != "untrusted:refs/pull/9/head:deploy-staging" {
		t.Fatalf("the fork's group: %q", got)
	}
	if got := runState(t, s, first.ID).State; got != domain.RunRunning {
		t.Fatalf("first: %s", got)
	}
}

// TestJobConcurrencySweeper: a group whose job ended without settling it
// (the process ended in between) is settled by the next sweep; a group
// that evaluates to nothing fails its job and says why.
func TestJobConcurrencySweeper(t *testing.T) {
	ctx := context.Background()
	s, r := groupStore(t)
	file := "jobs:\n  a: {concurrency: g, steps: [{run: x}]}\n"
	first := groupRun(t, s, "refs/heads/main", file)
	claimJob(t, s, r, first.ID, "a")
	second := groupRun(t, s, "refs/heads/main", file)
	// The end of first's job, without the settling that follows it.
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'PASSED', finished_at = now() WHERE run_id = $1`, first.ID); err != nil {
		t.Fatal(err)
	}
	if st := states(t, s, second.ID)["a"]; st != "PENDING" {
		t.Fatalf("second's job before the sweep: %s", st)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if st := states(t, s, second.ID)["a"]; st != "QUEUED" {
		t.Fatalf("second's job after a sweep: %s %v", st, reasons(t, s, second.ID))
	}

	empty := groupRun(t, s, "refs/heads/main", "jobs:\n  a: {concurrency: '${{ inputs.none }}', steps: [{run: x}]}\n")
	if st, why := states(t, s, empty.ID)["a"], reasons(t, s, empty.ID)["a"]; st != "FAILED" ||
		why != `concurrency.group: is "" here: a group is 1 to 400 characters` {
		t.Fatalf("a job whose group is empty: %s %q", st, why)
	}
}

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
	s, r := groupStore(t)
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
	s, r := groupStore(t)
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
	s, r := groupStore(t)
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
