package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRemovedMembersRunGetsNoSecrets: a trusted run's job is claimed only
// while the member it is for may still start trusted runs. Removed while
// her run's first job ran, and the secret rotated, her second job is not
// handed out with the new value: it ends CANCELED at the claim, saying
// why, and the claim hands out nothing. A member who keeps the
// permission is unaffected.
func TestRemovedMembersRunGetsNoSecrets(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	p, err := f.s.GetProject(ctx, f.root, "p")
	must(t, err)
	pipeline := "jobs:\n  a: {steps: [{run: make}]}\n  b: {needs: a, secrets: [DEPLOY_TOKEN], steps: [{run: deploy}]}\n"
	var runs []store.Run
	for _, name := range []string{"mallory", "carol"} {
		u, _, err := f.s.CreateUser(ctx, name, "user")
		must(t, err)
		_, err = f.s.SetMember(ctx, f.root, p.ID, u.ID, store.RoleWrite, true)
		must(t, err)
		run := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/x", By: &u, SourceBy: "user:" + u.ID}, pipeline)
		runs = append(runs, run)
		c := claimJob(t, f.s, f.r, run.ID, "a")
		if name == "mallory" {
			must(t, f.s.RemoveMember(ctx, f.root, p.ID, u.ID))
			must(t, f.s.SetSecret(ctx, f.root, p.ID, "DEPLOY_TOKEN", "rotated-after-removal"))
		}
		complete(t, f.s, f.r, c, domain.OutcomePassed)
	}
	// Mallory's b, queued first, was ended by the claim that went on to
	// take carol's a; carol's b gets the secret.
	c := claimJob(t, f.s, f.r, runs[1].ID, "b")
	if c.Secrets["DEPLOY_TOKEN"] != "rotated-after-removal" {
		t.Fatalf("the member who keeps the permission: secrets %v", c.Secrets)
	}
	if st, why := states(t, f.s, runs[0].ID)["b"], reasons(t, f.s, runs[0].ID)["b"]; st != domain.JobCanceled ||
		!strings.Contains(why, "may no longer start trusted runs") {
		t.Fatalf("the removed member's job b: %s (%s)", st, why)
	}
}

// TestRemovedMembersJobGetsNoIDToken: a job of a trusted run gets an
// identity token only while every member the run is for may still start
// trusted runs: once the member is removed, the job that holds its lease
// is refused one (403, saying why), at the grant and at the record.
func TestRemovedMembersJobGetsNoIDToken(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	p, err := f.s.GetProject(ctx, f.root, "p")
	must(t, err)
	u, _, err := f.s.CreateUser(ctx, "mallory", "user")
	must(t, err)
	_, err = f.s.SetMember(ctx, f.root, p.ID, u.ID, store.RoleWrite, true)
	must(t, err)
	run, err := f.s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: "refs/heads/x", By: &u,
		Jobs: []store.NewJob{{Name: "cloud", Spec: domain.JobSpec{IDToken: true}}}})
	must(t, err)
	r := f.r
	r.Features = append(r.Features, domain.FeatureIDToken)
	c := claimJob(t, f.s, r, run.ID, "cloud")
	g, err := f.s.GrantIDToken(ctx, r.ID, c.Lease.JobID, c.Lease)
	if err != nil {
		t.Fatalf("the member's job, before: %v", err)
	}
	must(t, f.s.RemoveMember(ctx, f.root, p.ID, u.ID))
	if err := f.s.RecordIDToken(ctx, r.ID, c.Lease.JobID, c.Lease, g, "sts.amazonaws.com"); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "may no longer start trusted runs") {
		t.Fatalf("the token granted before the removal, recorded after: %v", err)
	}
	if _, err := f.s.GrantIDToken(ctx, r.ID, c.Lease.JobID, c.Lease); domain.ErrorCode(err) != domain.EForbidden {
		t.Fatalf("a token after the removal: %v", err)
	}
}
