package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRevokedTokensSchedulesStop: a schedule runs its run's snapshot again
// with the project's secrets, so one set by a run made with a leaked token
// must not outlive the token. Revoking it removes the schedules its runs
// set (named in the answer), not those another token's runs set; a firing
// after a revocation it raced finds the token revoked and records the
// slot skipped, saying why; a revoked token sets no schedule; disabling
// the user removes those her other tokens' runs set. The answer names a
// schedule only where its maker may read the project.
func TestRevokedTokensSchedulesStop(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	root, alice, as := writerOfThree(t, s)
	leaked, raced := as("leaked"), as("raced")
	minute := (time.Now().UTC().Minute() + 59) % 60 // a minute ago
	schedule := func(project string, by store.User) error {
		pl, err := pipeline.Parse("f.yml", []byte(scheduledPipeline(minute, "run-once")))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.CreateRun(ctx, store.NewRun{Project: project, GitRef: "refs/heads/main", By: &by,
			Jobs: pl.Jobs, Schedules: pl.Schedules(), SourceBy: "user:" + by.ID})
		return err
	}
	for project, by := range map[string]store.User{"p": leaked, "q": alice, "r": raced} {
		if err := schedule(project, by); err != nil {
			t.Fatal(err)
		}
	}
	out, err := s.RevokeUserTokenAs(ctx, alice, alice.ID, leaked.TokenID)
	if err != nil {
		t.Fatal(err)
	}
	cron := fmt.Sprintf("%d * * * *", minute)
	if want := []string{"p: " + cron}; !slices.Equal(out.SchedulesRemoved, want) {
		t.Fatalf("schedules removed %v, want %v", out.SchedulesRemoved, want)
	}
	if n := count(t, s, `SELECT count(*) FROM schedules s JOIN projects p ON p.id = s.project_id WHERE p.name IN ('q', 'r')`); n != 2 {
		t.Fatalf("%d schedules of other tokens left, want 2", n)
	}
	// A revocation that commits after the firing listed the schedules
	// (its removal not seen): the firing's own check stops it.
	if _, err := s.Pool().Exec(ctx, `UPDATE user_tokens SET revoked_at = now() WHERE id = $1`, raced.TokenID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE schedules SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	res, err := s.FireSchedules(ctx)
	if err != nil || res.Fired != 1 || res.Skipped != 1 {
		t.Fatalf("fire: %+v %v, want q's fired and r's skipped", res, err)
	}
	if n := count(t, s, `SELECT count(*) FROM schedule_firings f JOIN projects p ON p.id = f.project_id
		WHERE p.name = 'r' AND f.skipped AND f.run_id IS NULL AND f.note LIKE '%schedule was set by a run made%since revoked%'`); n != 1 {
		t.Fatal("r's slot is not recorded skipped for its revoked token")
	}
	// A request authenticated before its token's revocation sets none.
	err = schedule("p", leaked)
	if domain.ErrorCode(err) != domain.EForbidden {
		t.Fatalf("a run with a revoked token: %v, want forbidden", err)
	}
	if n := count(t, s, `SELECT count(*) FROM schedules s JOIN projects p ON p.id = s.project_id WHERE p.name = 'p'`); n != 0 {
		t.Fatalf("a revoked token set %d schedules", n)
	}
	// A revocation names only schedules of projects its maker may read.
	gone := as("gone")
	if err := schedule("p", gone); err != nil {
		t.Fatal(err)
	}
	var pID string
	if err := s.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE name = 'p'`).Scan(&pID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveMember(ctx, root, pID, alice.ID); err != nil {
		t.Fatal(err)
	}
	out, err = s.RevokeUserTokenAs(ctx, alice, alice.ID, gone.TokenID)
	if want := []string{"1 in projects you cannot read"}; err != nil || !slices.Equal(out.SchedulesRemoved, want) {
		t.Fatalf("revoked after leaving p: %v %v, want %v", out.SchedulesRemoved, err, want)
	}
	// Disabling the user revokes all her tokens: q's goes too, and r's
	// (its token's revocation above did not remove it).
	d, err := s.DisableUserAs(ctx, root, alice.ID)
	if want := []string{"q: " + cron, "r: " + cron}; err != nil || !slices.Equal(d.SchedulesRemoved, want) {
		t.Fatalf("disable: %+v %v, want %v removed", d, err, want)
	}
}

// writerOfThree makes an admin and alice, a writer with the secrets
// permission in projects p, q and r, authenticated with her first token;
// as authenticates her with a new token.
func writerOfThree(t *testing.T, s *store.Store) (root, alice store.User, as func(description string) store.User) {
	ctx := context.Background()
	root = pgtest.Admin(t, s, "root")
	_, aliceToken, err := s.CreateUser(ctx, "alice", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"p", "q", "r"} {
		p := pgtest.Project(t, s, name)
		if _, err := s.SetMember(ctx, root, p.ID, "alice", store.RoleWrite, true); err != nil {
			t.Fatal(err)
		}
	}
	if alice, err = s.AuthenticateUser(ctx, aliceToken); err != nil {
		t.Fatal(err)
	}
	as = func(description string) store.User {
		_, token, err := s.CreateUserToken(ctx, alice.ID, description)
		if err != nil {
			t.Fatal(err)
		}
		u, err := s.AuthenticateUser(ctx, token)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	return root, alice, as
}
