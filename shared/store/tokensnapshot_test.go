package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRevokedTokensSnapshotStops: whoever held a leaked token and
// submitted a snapshot with it keeps nothing once it is revoked. The
// run's running job is asked to stop on its next heartbeat; its later job
// that names secrets is ended at the claim, saying why;
// the snapshot is not run again (a retry, a manual run, a firing: each
// makes its run in CreateRun), even by its member with a live token; and
// a schedule set by another token's run of that snapshot goes with the
// revocation.
func TestRevokedTokensSnapshotStops(t *testing.T) {
	ctx := context.Background()
	f, u, leaked, live := twoTokensOfAWriter(t)
	file := "on:\n  schedule: [{cron: '7 * * * *'}]\njobs:\n  a: {steps: [{run: make}]}\n  b: {needs: a, secrets: [DEPLOY_TOKEN], steps: [{run: deploy}]}\n"
	pl, err := pipeline.Parse("f.yml", []byte(file))
	must(t, err)
	submitted := store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &leaked, SourceBy: "user:" + u.ID,
		SourceToken: leaked.TokenID, Jobs: pl.Jobs}
	run, err := f.s.CreateRun(ctx, submitted)
	must(t, err)
	c := claimJob(t, f.s, f.r, run.ID, "a")
	// Run again by the member's live token (a manual run of the newest
	// snapshot), setting the schedule.
	again := submitted
	again.By, again.Schedules = &live, pl.Schedules()
	_, err = f.s.CreateRun(ctx, again)
	must(t, err)
	out, err := f.s.RevokeUserTokenAs(ctx, u, u.ID, leaked.TokenID)
	must(t, err)
	if want := []string{"p: 7 * * * *"}; !slices.Equal(out.SchedulesRemoved, want) {
		t.Errorf("schedules removed %v, want %v: its run's snapshot was submitted with the revoked token", out.SchedulesRemoved, want)
	}
	// Its job running at the revocation is asked to stop.
	if _, cancel, err := f.s.Heartbeat(ctx, f.r.ID, c.Lease.JobID, c.Lease); err != nil || !cancel {
		t.Errorf("the running job's heartbeat after the revocation: cancel %v (%v), want asked to stop", cancel, err)
	}
	complete(t, f.s, f.r, c, domain.OutcomePassed)
	for name, c := range claimAll(t, f.s, f.r) {
		if c.Lease.RunID == run.ID {
			t.Fatalf("the revoked token's run handed out job %s with secrets %v", name, c.Secrets)
		}
	}
	if st, why := states(t, f.s, run.ID)["b"], reasons(t, f.s, run.ID)["b"]; st != domain.JobCanceled || !strings.Contains(why, "was revoked") {
		t.Fatalf("the revoked token's job b: %s (%s)", st, why)
	}
	if _, err := f.s.Retry(ctx, live, run.ID, ""); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "submitted with an API token since revoked") {
		t.Fatalf("a retry of the revoked token's snapshot: %v, want forbidden", err)
	}
}

// TestRevokedTokensInputsStop: a manual run's inputs reach its scripts as
// its snapshot does. Given with a token since revoked, the run's later
// trusted job is not handed out, though it names no secrets (it would
// still run trusted: the runner's own credentials, the trusted caches),
// and a retry does not give the inputs again.
func TestRevokedTokensInputsStop(t *testing.T) {
	ctx := context.Background()
	f, u, leaked, live := twoTokensOfAWriter(t)
	pl, err := pipeline.Parse("f.yml", []byte("jobs:\n  a: {steps: [{run: make}]}\n  b: {needs: a, steps: [{run: 'echo ${{ inputs.x }}'}]}\n"))
	must(t, err)
	run, err := f.s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &leaked, SourceBy: "user:" + u.ID,
		SourceToken: live.TokenID, Jobs: pl.Jobs, Inputs: map[string]any{"x": "$(curl evil)"}})
	must(t, err)
	c := claimJob(t, f.s, f.r, run.ID, "a")
	_, err = f.s.RevokeUserTokenAs(ctx, u, u.ID, leaked.TokenID)
	must(t, err)
	complete(t, f.s, f.r, c, domain.OutcomePassed)
	for name, c := range claimAll(t, f.s, f.r) {
		if c.Lease.RunID == run.ID {
			t.Fatalf("the revoked token's inputs' run handed out job %s", name)
		}
	}
	if st, why := states(t, f.s, run.ID)["b"], reasons(t, f.s, run.ID)["b"]; st != domain.JobCanceled || !strings.Contains(why, "was revoked") {
		t.Fatalf("job b of the revoked token's inputs: %s (%s)", st, why)
	}
	if _, err := f.s.Retry(ctx, live, run.ID, ""); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "its inputs were given with an API token since revoked") {
		t.Fatalf("a retry of the revoked token's inputs: %v, want forbidden", err)
	}
}

// twoTokensOfAWriter is the deployment fixture with mallory, a writer with
// the secrets permission in p, authenticated with two tokens of hers: one
// to leak and revoke, one that stays.
func twoTokensOfAWriter(t *testing.T) (f deployFixture, u, leaked, live store.User) {
	ctx := context.Background()
	f = newDeployFixture(t)
	p, err := f.s.GetProject(ctx, f.root, "p")
	must(t, err)
	u, _, err = f.s.CreateUser(ctx, "mallory", "user")
	must(t, err)
	_, err = f.s.SetMember(ctx, f.root, p.ID, u.ID, store.RoleWrite, true)
	must(t, err)
	as := func() store.User {
		_, token, err := f.s.CreateUserToken(ctx, u.ID, "")
		must(t, err)
		by, err := f.s.AuthenticateUser(ctx, token)
		must(t, err)
		return by
	}
	return f, u, as(), as()
}
