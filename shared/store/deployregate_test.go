package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestDeployGatedAgainWhenRulesChange: deployments an environment let
// through that have not started are gated again when an admin tightens
// its rules (locking staging down during an incident): one whose ref is
// no longer allowed fails, with its dependants skipped; one now to be
// reviewed waits for a review again, and deploys once approved. Rules
// written again unchanged, or looser, leave them be.
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
	if len(decisions[feature.ID]) != 2 || decisions[feature.ID][0] != "refused" || len(decisions[main.ID]) != 2 || decisions[main.ID][0] != "approved" {
		t.Fatalf("history %v", decisions)
	}
}
