package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// An admin disabling another admin who, at that moment, makes a token for
// the first (or a membership naming them) must not deadlock: the
// disabling locks the users in one order but does not block the foreign
// key checks of rows that name them.
func TestDisableRacesTokenForTheDisabler(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	a, _, err := s.CreateUser(ctx, "a", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.CreateUser(ctx, "b", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID > b.ID {
		a, b = b, a // a sorts first, so its disabling locks a, then waits for b
	}
	// b's transaction: b is checked (its row held), then a token naming a.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM users WHERE id = $1 AND disabled_at IS NULL FOR SHARE`, b.ID); err != nil {
		t.Fatal(err)
	}
	disabled := make(chan error, 1)
	go func() { _, err := s.DisableUserAs(ctx, a, b.ID); disabled <- err }()
	waitForLockWait(t, s)
	if _, err := tx.Exec(ctx, `INSERT INTO user_tokens (id, user_id, token_hash, description)
		VALUES (gen_random_uuid()::text, $1, sha256('t'::bytea), 'by b')`, a.ID); err != nil {
		t.Fatalf("b's token for a: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-disabled; err != nil {
		t.Fatalf("a disabling b: %v", err)
	}
}

// A user disabled while making a token for themselves gets none.
func TestOwnTokenRacesDisable(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	u, _, err := s.CreateUser(ctx, "u", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `UPDATE users SET disabled_at = now() WHERE id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	made := make(chan error, 1)
	go func() { _, err := s.CreateUserTokenAs(ctx, u, u.ID, store.NewToken{Description: "mine"}); made <- err }()
	// It must wait for the disabling, not answer beside it.
	for !lockWaiting(t, s) {
		select {
		case err := <-made:
			t.Fatalf("a token made while its user was being disabled: %v", err)
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := tx.Exec(ctx, `UPDATE user_tokens SET revoked_at = now() WHERE user_id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-made; !domain.Is(err, domain.EUnauthorized) {
		t.Fatalf("a token made by a user disabled meanwhile: %v", err)
	}
	var live int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM user_tokens WHERE user_id = $1 AND revoked_at IS NULL`, u.ID).Scan(&live); err != nil || live != 0 {
		t.Fatalf("%d live tokens of a disabled user (%v)", live, err)
	}
}

// A source upload is checked and recorded in one transaction, in the
// tier the caller's membership gives now.
func TestSourceUploadChecksTheMember(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	root := pgtest.Admin(t, s, "root")
	p := pgtest.Project(t, s, "p")
	u, _, err := s.CreateUser(ctx, "w", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	upload := func() (store.Upload, error) { return s.PrepareUploadAs(ctx, u, p.ID, digest, 10) }
	if _, err := upload(); !domain.Is(err, domain.ENotFound) {
		t.Fatalf("not a member: %v", err)
	}
	for _, tc := range []struct {
		role    string
		secrets bool
		code    string
	}{
		{store.RoleRead, false, domain.EForbidden},
		{store.RoleWrite, false, ""},
		{store.RoleWrite, true, ""},
	} {
		if _, err := s.SetMember(ctx, root, p.ID, u.ID, tc.role, tc.secrets); err != nil {
			t.Fatal(err)
		}
		up, err := upload()
		switch {
		case tc.code != "" && !domain.Is(err, tc.code):
			t.Errorf("%s: %v, want %s", tc.role, err, tc.code)
		case tc.code == "" && (err != nil || up.Ref.Trusted != tc.secrets || up.Ref.ProjectID != p.ID):
			t.Errorf("%s, secrets %v: %+v %v", tc.role, tc.secrets, up, err)
		}
	}
}
