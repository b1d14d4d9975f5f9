package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

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
	made, err := s.CreateUserTokenAs(ctx, leaky, other.ID, store.NewToken{Description: "a backdoor"})
	if err != nil {
		t.Fatal(err)
	}
	minted := made.Token
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
	if _, err := s.CreateUserTokenAs(ctx, me, me.ID, store.NewToken{Description: "after"}); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a token made with a revoked token: %v, want unauthorized", err)
	}
}

// TestTokenLastUsed: a token's list entry says when it was last used, by a
// request or by a dashboard session opened with it, to the hour; a token
// never used says nothing, and another token's use is not its.
func TestTokenLastUsed(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	bob, token, err := s.CreateUser(ctx, "bob", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateUserToken(ctx, bob.ID, "never used"); err != nil {
		t.Fatal(err)
	}
	lastUsed := func() map[string]*time.Time {
		t.Helper()
		tokens, _, err := s.ListUserTokensAs(ctx, bob, bob.ID, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*time.Time{}
		for _, tok := range tokens {
			out[tok.Description] = tok.LastUsedAt
		}
		return out
	}
	if got := lastUsed(); got["first token"] != nil || got["never used"] != nil {
		t.Fatalf("unused tokens have a last use: %v", got)
	}
	u, err := s.AuthenticateUser(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	first := lastUsed()
	if first["first token"] == nil || time.Since(*first["first token"]) > time.Minute || first["never used"] != nil {
		t.Fatalf("after one request: %v", first)
	}
	// Within the hour a request writes nothing.
	back := func(d string) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, `UPDATE user_tokens SET last_used_at = now() - $2::interval WHERE id = $1`, u.TokenID, d); err != nil {
			t.Fatal(err)
		}
	}
	back("30 minutes")
	if _, err := s.AuthenticateUser(ctx, token); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed()["first token"]; got == nil || time.Since(*got) < 29*time.Minute {
		t.Fatalf("a request within the hour moved the last use to %v", got)
	}
	// A session opened with it, and its use, are the token's.
	back("2 hours")
	secret, _, err := s.OpenSession(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastUsed()["first token"]; got == nil || time.Since(*got) > time.Minute {
		t.Fatalf("signing in did not note a use: %v", got)
	}
	back("2 hours")
	if _, err := s.AuthenticateSession(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); got["first token"] == nil || time.Since(*got["first token"]) > time.Minute || got["never used"] != nil {
		t.Fatalf("a session's request did not note a use: %v", got)
	}
}

// TestRevocationReachesWhatATokenMade: a leaked admin token's user made
// for someone else, and its registration tokens not yet used, go when it
// is revoked; a registration token used before stays used (its runner is
// the admin's to revoke).
func TestRevocationReachesWhatATokenMade(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	_, leaked, err := s.CreateUser(ctx, "leaky", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	leaky, err := s.AuthenticateUser(ctx, leaked)
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := s.CreateUserAs(ctx, leaky, "ci-bot", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	reg, _, err := s.CreateRegistrationTokenAs(ctx, leaky, time.Hour, "", store.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	used, _, err := s.CreateRegistrationTokenAs(ctx, leaky, time.Hour, "", store.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := s.RegisterRunner(ctx, used, "before", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A runner registered with a token the made user's token made, and
	// one of those revoked already.
	bot, err := s.AuthenticateUser(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	deep := registerWith(t, s, bot, "deep")
	gone := registerWith(t, s, bot, "gone")
	if err := s.RevokeRunner(ctx, gone); err != nil {
		t.Fatal(err)
	}
	out, err := s.RevokeUserTokenAs(ctx, leaky, leaky.ID, leaky.TokenID)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{before, deep}; !slices.Equal(out.RunnersToCheck, slices.Sorted(slices.Values(want))) {
		t.Errorf("runners to check %v, want the live runners registered through the tree %v", out.RunnersToCheck, want)
	}
	if _, err := s.AuthenticateUser(ctx, first); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("the first token of a user made with a revoked token: %v, want unauthorized", err)
	}
	if _, _, err := s.RegisterRunner(ctx, reg, "after", nil); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a registration token made with a revoked token registers: %v, want unauthorized", err)
	}
	if _, _, err := s.CreateUserAs(ctx, leaky, "late", store.RoleUser); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a user made with a revoked token: %v, want unauthorized", err)
	}
	if _, _, err := s.CreateRegistrationTokenAs(ctx, leaky, time.Hour, "", store.Scope{}); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a registration token made with a revoked token: %v, want unauthorized", err)
	}
}

// registerWith registers a runner named name with a registration token by
// makes.
func registerWith(t *testing.T, s *store.Store, by store.User, name string) string {
	t.Helper()
	ctx := context.Background()
	reg, _, err := s.CreateRegistrationTokenAs(ctx, by, time.Hour, "", store.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := s.RegisterRunner(ctx, reg, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRevocationOfADeepTree: a chain of tokens each made with the one
// before is revoked whole, well within the API function's 29 s (one made
// to outlast it took 30 s before the tree's queries kept to its index),
// and a token whose making the revocation waited for is revoked too.
func TestRevocationOfADeepTree(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	u, token, err := s.CreateUser(ctx, "u", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	me, err := s.AuthenticateUser(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO user_tokens (id, user_id, token_hash, created_by_token)
		SELECT 'chain-' || i, $1, sha256(('chain-' || i)::bytea), CASE WHEN i = 1 THEN $2 ELSE 'chain-' || (i - 1) END
		FROM generate_series(1, 20000) i`, u.ID, me.TokenID); err != nil {
		t.Fatal(err)
	}
	// A token being made with the chain's last, committed while the
	// revocation waits for it.
	maker, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer maker.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := maker.Exec(ctx, `SELECT 1 FROM user_tokens WHERE id = 'chain-20000' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	if _, err := maker.Exec(ctx, `INSERT INTO user_tokens (id, user_id, token_hash, created_by_token)
		VALUES ('late', $1, sha256('late'), 'chain-20000')`, u.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var info store.TokenInfo
	go func() {
		var err error
		info, err = s.RevokeUserTokenAs(ctx, me, u.ID, me.TokenID)
		done <- err
	}()
	waitForLockWait(t, s)
	if err := maker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(started); took > 10*time.Second {
		t.Errorf("revoking a 20,000-deep chain took %v", took)
	}
	var live int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM user_tokens WHERE revoked_at IS NULL`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live != 0 || info.ID != me.TokenID || len(info.AlsoRevoked) != 20001 {
		t.Errorf("%d tokens live, revoked %s and %d more; want none live, %s and 20001 more", live, info.ID, len(info.AlsoRevoked), me.TokenID)
	}
}
