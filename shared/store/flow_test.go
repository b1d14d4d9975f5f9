package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// flowRun parses a pipeline and makes it a run on ref, with a runner that
// declares every feature.
func flowRun(t *testing.T, ref, file string) (*store.Store, store.Runner, store.Run) {
	t.Helper()
	p, err := pipeline.Parse("f.yml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	r.Features = []string{domain.FeatureExpressions, domain.FeatureOutputs, domain.FeatureSteps}
	run, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", GitRef: ref, Trigger: "github:push " + ref, Jobs: p.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	return s, r, run
}

// claimOnly claims every job that can be claimed now, and fails unless
// they are exactly names.
func claimOnly(t *testing.T, s *store.Store, r store.Runner, runID string, names ...string) map[string]*store.Claim {
	t.Helper()
	got := claimAll(t, s, r)
	ok := len(got) == len(names)
	for _, n := range names {
		ok = ok && got[n] != nil
	}
	if !ok {
		t.Fatalf("claimed %v, want %v (%v)", got, names, states(t, s, runID))
	}
	return got
}

// passEach completes each claim passed, then checks the run's state.
func passEach(t *testing.T, s *store.Store, r store.Runner, run store.Run, claims map[string]*store.Claim, want string) {
	t.Helper()
	for _, c := range claims {
		complete(t, s, r, c, domain.OutcomePassed)
	}
	if got, _ := s.GetRun(context.Background(), run.ID); got.State != want {
		t.Fatalf("run %s, want %s (%v)", got.State, want, states(t, s, run.ID))
	}
}

func reasons(t *testing.T, s *store.Store, runID string) map[string]string {
	t.Helper()
	return jobColumn(t, s, runID, "reason")
}

// TestJobConditions: the control plane decides a job's if: when its needs
// end, with the run's facts, needs.<job>.result and .outputs and the
// status functions, as GitHub's; continue-on-error lets dependants run
// and the run pass; a dependant that reads needs gets them in its spec.
func TestJobConditions(t *testing.T) {
	ctx := context.Background()
	s, r, run := flowRun(t, "refs/heads/main", `jobs:
  build:
    outputs: {version: "${{ steps.v.outputs.version }}"}
    steps: [{id: v, run: "true"}]
  test: {needs: build, steps: [{run: x}]}
  on-main:
    needs: build
    if: github.ref == 'refs/heads/main' && needs.build.outputs.version == '1.2.3'
    steps: [{run: x}]
  on-tag: {needs: build, if: "startsWith(github.ref, 'refs/tags/')", steps: [{run: x}]}
  broken: {needs: build, if: "fromJSON('{')", steps: [{run: x}]}
  use-version:
    needs: build
    env: {V: "${{ needs.build.outputs.version }}"}
    steps: [{run: x}]
  cleanup: {needs: test, if: always(), steps: [{run: x}]}
  on-failure: {needs: test, if: "failure() && needs.test.result == 'failure'", steps: [{run: x}]}
  on-success: {needs: test, steps: [{run: x}]}
  flaky: {continue-on-error: true, steps: [{run: x}]}
  after-flaky: {needs: flaky, if: "needs.flaky.result == 'success'", steps: [{run: x}]}
`)
	first := claimOnly(t, s, r, run.ID, "build", "flaky")
	b := first["build"]
	if err := s.SetOutputs(ctx, r.ID, b.Lease.JobID, b.Lease, map[string]string{"version": "1.2.3"}); err != nil {
		t.Fatal(err)
	}
	complete(t, s, r, b, domain.OutcomePassed)
	complete(t, s, r, first["flaky"], domain.OutcomeFailed)
	second := claimAll(t, s, r)
	want := map[string]string{"build": "PASSED", "flaky": "FAILED", "test": "RUNNING", "on-main": "RUNNING", "on-tag": "SKIPPED",
		"broken": "FAILED", "use-version": "RUNNING", "cleanup": "PENDING", "on-failure": "PENDING", "on-success": "PENDING",
		"after-flaky": "RUNNING"}
	if got := states(t, s, run.ID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after build: %v\nwant %v", got, want)
	}
	why := reasons(t, s, run.ID)
	if why["on-tag"] != "if: startsWith(github.ref, 'refs/tags/') was false" || why["broken"] == "" {
		t.Fatalf("reasons %q", why)
	}
	var job domain.ClaimedJob
	if err := json.Unmarshal(second["use-version"].Job, &job); err != nil {
		t.Fatal(err)
	}
	if nr := job.NeedResults["build"]; nr.Result != "success" || nr.Outputs["version"] != "1.2.3" || job.Env["V"] != "${{ needs.build.outputs.version }}" {
		t.Fatalf("use-version spec: %+v %q", job.NeedResults, job.Env)
	}
	for _, name := range []string{"on-main", "use-version", "after-flaky"} {
		complete(t, s, r, second[name], domain.OutcomePassed)
	}
	complete(t, s, r, second["test"], domain.OutcomeFailed)
	third := claimOnly(t, s, r, run.ID, "cleanup", "on-failure")
	if st := states(t, s, run.ID)["on-success"]; st != "SKIPPED" {
		t.Fatalf("on-success %s", st)
	}
	passEach(t, s, r, run, third, domain.RunFailed)
}

// TestContinueOnErrorPasses: a run whose only failure is a job with
// continue-on-error passes.
func TestContinueOnErrorPasses(t *testing.T) {
	s, r, run := flowRun(t, "refs/heads/main", "jobs:\n  a: {continue-on-error: true, steps: [{run: x}]}\n  b: {needs: a, steps: [{run: x}]}\n")
	complete(t, s, r, claimAll(t, s, r)["a"], domain.OutcomeFailed)
	complete(t, s, r, claimAll(t, s, r)["b"], domain.OutcomePassed)
	if got, _ := s.GetRun(context.Background(), run.ID); got.State != domain.RunPassed {
		t.Fatalf("run %s, jobs %v", got.State, states(t, s, run.ID))
	}
}

// TestCancelLeavesAlways: a run's cancel cancels its waiting jobs except
// those whose if: calls always() or cancelled(), which run once the
// canceled jobs end.
func TestCancelLeavesAlways(t *testing.T) {
	ctx := context.Background()
	s, r, run := flowRun(t, "refs/heads/main", `jobs:
  a: {steps: [{run: x}]}
  plain: {needs: a, steps: [{run: x}]}
  on-failure: {needs: a, if: failure(), steps: [{run: x}]}
  always: {needs: plain, if: always(), steps: [{run: x}]}
  on-cancel: {needs: a, if: cancelled(), steps: [{run: x}]}
  always-not-main: {needs: a, if: "always() && github.ref != 'refs/heads/main'", steps: [{run: x}]}
`)
	a := claimAll(t, s, r)["a"]
	root := pgtest.Admin(t, s, "root")
	if _, _, err := s.Cancel(ctx, root, run.ID, ""); err != nil {
		t.Fatal(err)
	}
	// always needs plain, which has ended: it is decided at once.
	want := map[string]string{"a": "RUNNING", "plain": "CANCELED", "on-failure": "CANCELED", "always": "QUEUED",
		"on-cancel": "PENDING", "always-not-main": "PENDING"}
	if got := states(t, s, run.ID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after cancel: %v\nwant %v", got, want)
	}
	// The job running at the cancel hears it; the jobs that run after it
	// because of it do not.
	if _, cancel, err := s.Heartbeat(ctx, r.ID, a.Lease.JobID, a.Lease); err != nil || !cancel {
		t.Fatalf("heartbeat of the job running at the cancel: cancel %v, %v", cancel, err)
	}
	complete(t, s, r, a, domain.OutcomeCanceled)
	after := claimOnly(t, s, r, run.ID, "always", "on-cancel")
	for name, c := range after {
		if _, cancel, err := s.Heartbeat(ctx, r.ID, c.Lease.JobID, c.Lease); err != nil || cancel {
			t.Fatalf("heartbeat of %s, which runs because of the cancel: cancel %v, %v", name, cancel, err)
		}
	}
	if st := states(t, s, run.ID)["always-not-main"]; st != "SKIPPED" {
		t.Fatalf("always-not-main %s", st)
	}
	passEach(t, s, r, run, after, domain.RunCanceled)
}

// TestFailFastAndMaxParallel: a matrix combination's failure cancels the
// others (waiting ones at once, running ones through their heartbeat)
// unless fail-fast is false; max-parallel bounds how many are queued or
// running at once.
func TestFailFastAndMaxParallel(t *testing.T) {
	ctx := context.Background()
	s, r, run := flowRun(t, "refs/heads/main", `jobs:
  m: {strategy: {matrix: {n: [1, 2, 3]}}, steps: [{run: x}]}
  q: {strategy: {max-parallel: 2, fail-fast: false, matrix: {n: [1, 2, 3]}}, steps: [{run: x}]}
  after: {needs: m, steps: [{run: x}]}
`)
	c := claimAll(t, s, r)
	if len(c) != 5 || c["q (3)"] != nil {
		t.Fatalf("claimed %v: want m's three and two of q", c)
	}
	complete(t, s, r, c["m (1)"], domain.OutcomeFailed)
	for _, name := range []string{"m (2)", "m (3)"} {
		_, cancel, err := s.Heartbeat(ctx, r.ID, c[name].Lease.JobID, c[name].Lease)
		if err != nil || !cancel {
			t.Fatalf("%s heartbeat: cancel %v, %v", name, cancel, err)
		}
		complete(t, s, r, c[name], domain.OutcomeCanceled)
	}
	complete(t, s, r, c["q (1)"], domain.OutcomeFailed)
	q3 := claimAll(t, s, r)["q (3)"]
	if q3 == nil {
		t.Fatalf("q (3) not queued after q (1) ended: %v", states(t, s, run.ID))
	}
	if st := states(t, s, run.ID)["q (2)"]; st != "RUNNING" {
		t.Fatalf("q (2) is %s: fail-fast: false must leave it running", st)
	}
	if why := reasons(t, s, run.ID); why["m (2)"] != "canceled" && why["m (2)"] != "fail-fast: m (1) failed" {
		t.Fatalf("reasons %q", why)
	}
}

// TestConditionWorkBounded: a condition is evaluated while the run's row
// is locked, so its work is bounded: one that reads a large output too
// many times ends its job FAILED, saying why, and the run goes on.
func TestConditionWorkBounded(t *testing.T) {
	ctx := context.Background()
	heavy := "contains(needs.a.outputs.big, 'x')"
	for range 5 {
		heavy += " || contains(needs.a.outputs.big, 'x')"
	}
	s, r, run := flowRun(t, "refs/heads/main", `jobs:
  a: {outputs: {big: "${{ steps.s.outputs.big }}"}, steps: [{id: s, run: x}]}
  heavy: {needs: a, if: "`+heavy+`", steps: [{run: x}]}
  light: {needs: a, if: "needs.a.outputs.big != ''", steps: [{run: x}]}
`)
	a := claimAll(t, s, r)["a"]
	if err := s.SetOutputs(ctx, r.ID, a.Lease.JobID, a.Lease, map[string]string{"big": strings.Repeat("y", 1000000)}); err != nil {
		t.Fatal(err)
	}
	complete(t, s, r, a, domain.OutcomePassed)
	if got := states(t, s, run.ID); got["heavy"] != "FAILED" || got["light"] != "QUEUED" {
		t.Fatalf("states %v", got)
	}
	if why := reasons(t, s, run.ID)["heavy"]; !strings.Contains(why, "too much work") {
		t.Fatalf("heavy: reason %q", why)
	}
}

// TestRetryKeepsFlow: a retried run's jobs keep their conditions, and
// get the new run's needs context, not the old one's.
func TestRetryKeepsFlow(t *testing.T) {
	ctx := context.Background()
	s, r, run := flowRun(t, "refs/heads/main", `jobs:
  a: {outputs: {v: "${{ steps.s.outputs.v }}"}, steps: [{id: s, run: x}]}
  on-failure: {needs: a, if: failure(), steps: [{run: x}]}
  reader: {needs: a, if: always(), env: {V: "${{ needs.a.outputs.v }}"}, steps: [{run: x}]}
`)
	a := claimAll(t, s, r)["a"]
	if err := s.SetOutputs(ctx, r.ID, a.Lease.JobID, a.Lease, map[string]string{"v": "old"}); err != nil {
		t.Fatal(err)
	}
	complete(t, s, r, a, domain.OutcomeFailed)
	rest := claimAll(t, s, r)
	complete(t, s, r, rest["on-failure"], domain.OutcomePassed)
	complete(t, s, r, rest["reader"], domain.OutcomePassed)
	again, err := s.Retry(ctx, pgtest.Admin(t, s, "root"), run.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	a = claimAll(t, s, r)["a"]
	complete(t, s, r, a, domain.OutcomePassed)
	rest = claimAll(t, s, r)
	if st := states(t, s, again.ID); st["on-failure"] != "SKIPPED" || rest["reader"] == nil {
		t.Fatalf("retried run: %v", st)
	}
	var job domain.ClaimedJob
	if err := json.Unmarshal(rest["reader"].Job, &job); err != nil {
		t.Fatal(err)
	}
	if nr := job.NeedResults["a"]; nr.Result != "success" || len(nr.Outputs) != 0 {
		t.Fatalf("retried reader's needs: %+v", job.NeedResults)
	}
}

// TestReasonCutOnCharacter: a false condition's reason is cut at 300
// bytes without splitting a character (a text column refuses a split one,
// and the completion with it, forever).
func TestReasonCutOnCharacter(t *testing.T) {
	pad := strings.Repeat("x", 268) // "if: always() && github.ref == '" is 31 bytes: an é spans bytes 300 and 301
	s, r, run := flowRun(t, "refs/heads/main", "jobs:\n  a: {steps: [{run: x}]}\n  b: {needs: a, if: \"always() && github.ref == '"+pad+"ééééééééééééé'\", steps: [{run: x}]}\n")
	complete(t, s, r, claimAll(t, s, r)["a"], domain.OutcomePassed)
	if st := states(t, s, run.ID)["b"]; st != "SKIPPED" {
		t.Fatalf("b %s", st)
	}
	if why := reasons(t, s, run.ID)["b"]; !utf8.ValidString(why) || len(why) > 300 || !strings.HasPrefix(why, "if: always()") {
		t.Fatalf("reason %q", why)
	}
}

// TestCancelWaitingForApproval: a run still waiting for approval has run
// nothing; its cancel ends every job, always() ones too.
func TestCancelWaitingForApproval(t *testing.T) {
	ctx := context.Background()
	s, _, run := flowRun(t, "refs/heads/main", "jobs:\n  a: {steps: [{run: x}]}\n  cleanup: {needs: a, if: always(), steps: [{run: x}]}\n")
	if _, err := s.Pool().Exec(ctx, `UPDATE runs SET approval = 'pending' WHERE id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, pgtest.Admin(t, s, "root"), run.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, run.ID); got.State != domain.RunCanceled {
		t.Fatalf("run %s, jobs %v", got.State, states(t, s, run.ID))
	}
}

// TestNeedsContextBounded: the needs context put into a job's spec (and
// so its claim) is at most 1 MiB; a job whose needs' outputs are more
// ends FAILED, saying so, rather than never be claimable.
func TestNeedsContextBounded(t *testing.T) {
	ctx := context.Background()
	s, r, run := flowRun(t, "refs/heads/main", `jobs:
  a: {outputs: {o: "${{ steps.s.outputs.o }}"}, steps: [{id: s, run: x}]}
  b: {outputs: {o: "${{ steps.s.outputs.o }}"}, steps: [{id: s, run: x}]}
  reader: {needs: [a, b], env: {X: "${{ needs.a.outputs.o }}"}, steps: [{run: x}]}
`)
	for _, c := range claimAll(t, s, r) {
		if err := s.SetOutputs(ctx, r.ID, c.Lease.JobID, c.Lease, map[string]string{"o": strings.Repeat("y", 600000)}); err != nil {
			t.Fatal(err)
		}
		complete(t, s, r, c, domain.OutcomePassed)
	}
	if st, why := states(t, s, run.ID)["reader"], reasons(t, s, run.ID)["reader"]; st != "FAILED" || !strings.Contains(why, "a job may read") {
		t.Fatalf("reader %s %q", st, why)
	}
}
