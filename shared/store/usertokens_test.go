package store_test

import (
	"context"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestTokensCheckedWhenChanged: who may see or revoke a user's tokens is
// read in the transaction, not taken from the caller's authentication: an
// admin demoted since, or a user disabled since, changes nothing.
func TestTokensCheckedWhenChanged(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	admin, _, err := s.CreateUser(ctx, "admin", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	bob, bobToken, err := s.CreateUser(ctx, "bob", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _, err := s.ListUserTokensAs(ctx, admin, bob.ID, store.Page{})
	if err != nil || len(tokens) != 1 {
		t.Fatalf("an admin lists bob's tokens: %v %v", tokens, err)
	}
	// admin, as authenticated, is demoted before the change.
	if _, err := s.Pool().Exec(ctx, `UPDATE users SET role = 'user' WHERE id = $1`, admin.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeUserTokenAs(ctx, admin, bob.ID, tokens[0].ID); !domain.Is(err, domain.EForbidden) {
		t.Errorf("a demoted admin revokes: %v, want forbidden", err)
	}
	if _, _, err := s.ListUserTokensAs(ctx, admin, bob.ID, store.Page{}); !domain.Is(err, domain.EForbidden) {
		t.Errorf("a demoted admin lists: %v, want forbidden", err)
	}
	// bob, as authenticated, is disabled (his tokens revoked) before he
	// acts on his own: refused, and his token keeps the time it was
	// revoked by the disabling.
	if err := s.DisableUser(ctx, bob.ID); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := s.Pool().QueryRow(ctx, `SELECT revoked_at::text FROM user_tokens WHERE id = $1`, tokens[0].ID).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeUserTokenAs(ctx, bob, bob.ID, tokens[0].ID); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a disabled user revokes: %v, want unauthorized", err)
	}
	if _, _, err := s.ListUserTokensAs(ctx, bob, bob.ID, store.Page{}); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a disabled user lists: %v, want unauthorized", err)
	}
	if _, err := s.AuthenticateUser(ctx, bobToken); err == nil {
		t.Error("a disabled user's token still authenticates")
	}
}

// TestTokenLineage: disabling a user revokes the tokens made with theirs,
// other users' too (a leaked admin token minting one for another admin);
// and a token cannot be made with a token revoked since the request was
// authenticated.
func TestTokenLineage(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	_, leaked, err := s.CreateUser(ctx, "leaky", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := s.CreateUser(ctx, "other", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	leaky, err := s.AuthenticateUser(ctx, leaked)
	if err != nil {
		t.Fatal(err)
	}
	_, minted, err := s.CreateUserTokenAs(ctx, leaky, other.ID, "a backdoor")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DisableUser(ctx, leaky.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthenticateUser(ctx, minted); err == nil {
		t.Error("a token made for another admin with a disabled user's token still authenticates")
	}
	// A token revoked after its request was authenticated makes nothing.
	_, mine, err := s.CreateUser(ctx, "mine", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	me, err := s.AuthenticateUser(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeUserTokenAs(ctx, me, me.ID, me.TokenID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateUserTokenAs(ctx, me, me.ID, "after"); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a token made with a revoked token: %v, want unauthorized", err)
	}
}
