package store_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// TestDeployGatedAgainWhenRulesChange: deployments an environment let
// through that have not started are gated again when its rules change
// (an admin locking staging down during an incident): one whose ref is no
// longer allowed fails, with its dependants skipped; one now to be
// reviewed waits for a review, and deploys once approved. Rules written
// again unchanged leave them be.
func TestDeployGatedAgainWhenRulesChange(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	pipeline := strings.ReplaceAll(deployPipeline, "ENV", "staging")
	feature, main := groupRun(t, f.s, "refs/heads/feature/x", pipeline), groupRun(t, f.s, "refs/heads/main", pipeline)
	for range 2 { // the builds
		c, err := f.s.Claim(ctx, f.r, nil, 0)
		if err != nil || c == nil {
			t.Fatalf("claim a build: %v %v", c, err)
		}
		complete(t, f.s, f.r, c, domain.OutcomePassed)
	}
	deployOf := func(run store.Run) string { return jobColumn(t, f.s, run.ID, "id")["deploy"] }
	state := func(run store.Run, job string) string { return jobColumn(t, f.s, run.ID, "state")[job] }
	if state(feature, "deploy") != "QUEUED" || state(main, "deploy") != "QUEUED" {
		t.Fatalf("staging has no rules: deploys %s and %s, want both queued", state(feature, "deploy"), state(main, "deploy"))
	}
	loose := store.Environment{Name: "staging", AllowedRefs: []string{"main", "feature/*"}}
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", loose); err != nil {
		t.Fatal(err)
	}
	if state(feature, "deploy") != "QUEUED" || state(main, "deploy") != "QUEUED" {
		t.Fatal("rules that still let both through held one")
	}

	locked := store.Environment{Name: "staging", ReviewerRole: store.RoleAdmin, AllowedRefs: []string{"main"}}
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", locked); err != nil {
		t.Fatal(err)
	}
	if state(feature, "deploy") != "FAILED" || state(feature, "after") != "SKIPPED" {
		t.Fatalf("feature/x after the lockdown: deploy %s, after %s; want FAILED, SKIPPED", state(feature, "deploy"), state(feature, "after"))
	}
	if got := jobColumn(t, f.s, main.ID, "deploy_state")["deploy"]; state(main, "deploy") != "PENDING" || got != "waiting" {
		t.Fatalf("main after the lockdown: %s, %s; want PENDING, waiting", state(main, "deploy"), got)
	}
	if n := len(claimAll(t, f.s, f.r)); n != 0 {
		t.Fatalf("%d jobs claimed after the lockdown", n)
	}
	if _, err := f.s.DecideDeployment(ctx, f.root, main.ID, deployOf(main), true, "incident over"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", locked); err != nil { // unchanged
		t.Fatal(err)
	}
	c := claimJob(t, f.s, f.r, main.ID, "deploy")
	if c.Secrets["DEPLOY_TOKEN"] != "project-wide-token" {
		t.Fatalf("the approved deployment's secrets: %v", c.Secrets)
	}
	complete(t, f.s, f.r, c, domain.OutcomePassed)
	decisions := map[string][]string{}
	for _, d := range f.deployments(t, "staging") {
		decisions[d.RunID] = append(decisions[d.RunID], d.Decision)
	}
	if strings.Join(decisions[feature.ID], " ") != "refused automatic automatic" || strings.Join(decisions[main.ID], " ") != "approved automatic automatic" {
		t.Fatalf("history %v", decisions)
	}
}

// TestClaimFence: an approved deployment let through under rules that are
// no longer its environment's (a gate that read them just before they
// changed) is not claimed; gated again, it is.
func TestClaimFence(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	_, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "staging", AllowedRefs: []string{"main"}})
	must(t, err)
	run := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &f.root}, deployOnly)
	if _, err := f.s.Pool().Exec(ctx, `UPDATE jobs SET deploy_rules_at = 'epoch' WHERE run_id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	if c, err := f.s.Claim(ctx, f.r, nil, 0); err != nil || c != nil {
		t.Fatalf("claimed a deployment let through under other rules: %v %v", c, err)
	}
	if n, err := f.s.RegateStale(ctx, "", "", 10); err != nil || n != 1 {
		t.Fatalf("gated again %d runs: %v", n, err)
	}
	claimJob(t, f.s, f.r, run.ID, "deploy")
}

// TestRegateWakesIdleRunners: a queued deployment fenced by a change of
// rules, then let through unchanged by the gate, becomes claimable with
// no change of state: idle runners, resting on the queue hint they read
// while it was fenced, must see the hint change.
func TestRegateWakesIdleRunners(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	b := wake.New(castest.New(t), time.Second)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	b.SetClock(func() time.Time { return time.Unix(0, clock.Load()) })
	f.s.SetBoard(b)
	_, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "staging", AllowedRefs: []string{"main"}})
	must(t, err)
	run := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &f.root}, deployOnly)
	if _, err := f.s.Pool().Exec(ctx, `UPDATE jobs SET deploy_rules_at = 'epoch' WHERE run_id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(wake.QueueSettle + 2*wake.Skew))
	rest := b.Queue(ctx, "")
	if c, settled, err := f.s.ClaimScan(ctx, f.r, nil); err != nil || c != nil || !settled || rest.Token == "" {
		t.Fatalf("the runner's scan while the deployment is fenced: %v %v %v, hint %+v", c, settled, err, rest)
	}
	if n, err := f.s.RegateStale(ctx, "", "", 10); err != nil || n != 1 {
		t.Fatalf("gated again %d runs: %v", n, err)
	}
	clock.Add(int64(wake.QueueSettle + 2*wake.Skew))
	if q := b.Queue(ctx, rest.Token); q.Idle {
		t.Fatal("the deployment let through again left the queue hint as it was: idle runners never look")
	}
	claimJob(t, f.s, f.r, run.ID, "deploy")
}

const deployOnly = "jobs:\n  deploy:\n    environment: {name: staging}\n    retry: {failed: 2}\n    steps: [{run: x}]\n"

// TestRegateWhileARunnerHoldsTheJob: a runner's call holds a deployment's
// row and then wants its run's (as a claim marking the run started does)
// while the rules change: the re-gate never waits for the job while it
// holds the run (that was a deadlock, and the lockdown or the claim
// failed); it lets go and tries again.
func TestRegateWhileARunnerHoldsTheJob(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	run := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/feature/x", By: &f.root}, deployOnly)
	call, err := f.s.Pool().Begin(ctx)
	must(t, err)
	defer call.Rollback(ctx) //nolint:errcheck
	if _, err := call.Exec(ctx, `SELECT 1 FROM jobs WHERE run_id = $1 FOR UPDATE`, run.ID); err != nil {
		t.Fatal(err)
	}
	saved := make(chan error, 1)
	go func() {
		_, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "staging", AllowedRefs: []string{"main"}})
		saved <- err
	}()
	time.Sleep(100 * time.Millisecond) // the re-gate tries meanwhile
	if _, err := call.Exec(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, run.ID); err != nil {
		t.Fatalf("the runner's call: %v", err)
	}
	must(t, call.Commit(ctx))
	if err := <-saved; err != nil {
		t.Fatalf("the lockdown: %v", err)
	}
	if state := jobColumn(t, f.s, run.ID, "state")["deploy"]; state != "FAILED" {
		t.Fatalf("deploy %s after the lockdown, want FAILED", state)
	}
}

// TestRetriedDeploymentGatedAgain: a deployment running when its
// environment's rules changed keeps its attempt, but its retry is not
// claimed under the old approval: the sweeper gates it again.
func TestRetriedDeploymentGatedAgain(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	run := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/feature/x", By: &f.root}, deployOnly)
	c := claimJob(t, f.s, f.r, run.ID, "deploy")
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "staging", AllowedRefs: []string{"main"}}); err != nil {
		t.Fatal(err)
	}
	complete(t, f.s, f.r, c, domain.OutcomeFailed)
	if again, err := f.s.Claim(ctx, f.r, nil, 0); err != nil || again != nil {
		t.Fatalf("the retry was claimed under the old approval: %v %v", again, err)
	}
	if _, err := f.s.RegateStale(ctx, "", "", 10); err != nil {
		t.Fatal(err)
	}
	if state := jobColumn(t, f.s, run.ID, "state")["deploy"]; state != "FAILED" {
		t.Fatalf("deploy %s after the sweeper, want FAILED (refused)", state)
	}
}

// TestRegateLeavesWhatItDoesNotChange: rules written while a deployment
// runs and logs (an append holds its row FOR KEY SHARE) are saved at
// once; a job a runner's call keeps holding is left to the sweeper, and
// not claimed meanwhile.
func TestRegateLeavesWhatItDoesNotChange(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	running := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &f.root}, deployOnly)
	claimJob(t, f.s, f.r, running.ID, "deploy")
	appending, err := f.s.Pool().Begin(ctx)
	must(t, err)
	defer appending.Rollback(ctx) //nolint:errcheck
	if _, err := appending.Exec(ctx, `SELECT 1 FROM jobs WHERE run_id = $1 FOR KEY SHARE`, running.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "staging", AllowedRefs: []string{"main"}}); err != nil {
		t.Fatalf("rules that let the running deployment through: %v", err)
	}
	if took := time.Since(start); took > 300*time.Millisecond {
		t.Fatalf("saving took %v: it waited for the running deployment", took)
	}
	must(t, appending.Rollback(ctx))

	queued := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/feature/y", By: &f.root},
		strings.ReplaceAll(deployOnly, "staging", "other"))
	held, err := f.s.Pool().Begin(ctx)
	must(t, err)
	defer held.Rollback(ctx) //nolint:errcheck
	if _, err := held.Exec(ctx, `SELECT 1 FROM jobs WHERE run_id = $1 FOR UPDATE`, queued.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "other", AllowedRefs: []string{"main"}}); err != nil {
		t.Fatalf("a deployment held all along: %v", err)
	}
	must(t, held.Rollback(ctx))
	if c, err := f.s.Claim(ctx, f.r, nil, 0); err != nil || c != nil {
		t.Fatalf("claimed a deployment not gated again yet: %v %v", c, err)
	}
	if next, err := f.s.NextSweep(ctx); err != nil || next.IsZero() || next.After(time.Now().Add(time.Second)) {
		t.Fatalf("the sweeper is next due at %v (%v), want now: a deployment waits to be gated again", next, err)
	}
	if n, err := f.s.RegateStale(ctx, "", "", 10); err != nil || n != 1 {
		t.Fatalf("the sweeper gated again %d runs: %v", n, err)
	}
	if state := jobColumn(t, f.s, queued.ID, "state")["deploy"]; state != "FAILED" {
		t.Fatalf("deploy %s, want FAILED", state)
	}
}

// TestRegateKeepsTheGroupsOrder: rules that still let a deployment
// through keep its place in its job group: the older run's deployment,
// queued, holds the group, and the newer one still waits behind it (sent
// back to the gate, the older one rejoined as the newest and superseded
// the newer, so an older commit deployed last).
func TestRegateKeepsTheGroupsOrder(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	grouped := "jobs:\n  deploy:\n    environment: {name: staging}\n    concurrency: {group: prod}\n    steps: [{run: x}]\n"
	older := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &f.root}, grouped)
	newer := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &f.root}, grouped)
	state := func(run store.Run) string { return jobColumn(t, f.s, run.ID, "state")["deploy"] }
	if state(older) != "QUEUED" || state(newer) != "PENDING" {
		t.Fatalf("before: older %s, newer %s; want QUEUED, PENDING", state(older), state(newer))
	}
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "staging", AllowedRefs: []string{"main"}}); err != nil {
		t.Fatal(err)
	}
	if state(older) != "QUEUED" || state(newer) != "PENDING" {
		t.Fatalf("after rules that let both through: older %s, newer %s; want QUEUED, PENDING", state(older), state(newer))
	}
	c := claimJob(t, f.s, f.r, older.ID, "deploy")
	complete(t, f.s, f.r, c, domain.OutcomePassed)
	claimJob(t, f.s, f.r, newer.ID, "deploy")
}
