package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestTokensExpire: a token made to work N days stops working then, for
// requests and dashboard sessions alike (one opened before too, whose
// life never outlasts its token's); a token made with an expiring token
// (another of one's own, or a new user's first) expires no later than it,
// so a leaked token cannot mint one that outlives it; the list says when.
func TestTokensExpire(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	_, rootToken, err := s.CreateUser(ctx, "root", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.AuthenticateUser(ctx, rootToken)
	if err != nil {
		t.Fatal(err)
	}
	for _, days := range []int{-1, store.MaxTokenDays + 1} {
		if _, err := s.CreateUserTokenAs(ctx, root, root.ID, store.NewToken{ExpiresInDays: days}); !domain.Is(err, domain.EInvalid) {
			t.Errorf("a token of %d days: %v, want invalid", days, err)
		}
	}
	day, err := s.CreateUserTokenAs(ctx, root, root.ID, store.NewToken{Description: "a day", ExpiresInDays: 1})
	if err != nil || day.ExpiresAt == nil || time.Until(*day.ExpiresAt) < 23*time.Hour || time.Until(*day.ExpiresAt) > 25*time.Hour {
		t.Fatalf("a token of one day: %+v %v", day, err)
	}
	short, err := s.AuthenticateUser(ctx, day.Token)
	if err != nil {
		t.Fatal(err)
	}
	forever := madeWithExpiring(t, s, short, root, day)
	// A runner registration token made with it (short is a global admin's):
	// no later either, or a runner registered after the day would outlive it.
	_, regExpires, err := s.CreateRegistrationTokenAs(ctx, short, 30*24*time.Hour, "", store.Scope{})
	if err != nil || !regExpires.Equal(*day.ExpiresAt) {
		t.Fatalf("a registration token made with it for 30 days: expires %v (%v), want %v", regExpires, err, day.ExpiresAt)
	}
	// A session's life (12 hours) never outlasts its token's: one that
	// ends in an hour.
	if _, err := s.Pool().Exec(ctx, `UPDATE user_tokens SET expires_at = now() + interval '1 hour' WHERE id = $1`, day.ID); err != nil {
		t.Fatal(err)
	}
	secret, _, err := s.OpenSession(ctx, day.Token)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM ui_sessions s JOIN user_tokens t ON t.id = s.token_id
		WHERE t.id = $1 AND s.expires_at <= t.expires_at`, day.ID); n != 1 {
		t.Fatal("the session outlives its token")
	}
	// The day is over.
	if _, err := s.Pool().Exec(ctx, `UPDATE user_tokens SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"a request":            func() error { _, err := s.AuthenticateUser(ctx, day.Token); return err }(),
		"a token made with it": func() error { _, err := s.AuthenticateUser(ctx, forever.Token); return err }(),
		"its session":          func() error { _, err := s.AuthenticateSession(ctx, secret); return err }(),
		"a sign-in":            func() error { _, _, err := s.OpenSession(ctx, day.Token); return err }(),
		"a new token":          func() error { _, err := s.CreateUserTokenAs(ctx, short, root.ID, store.NewToken{}); return err }(),
	} {
		if !domain.Is(err, domain.EUnauthorized) {
			t.Errorf("%s with an expired token: %v, want unauthorized", what, err)
		}
	}
	list, _, err := s.ListUserTokensAs(ctx, root, root.ID, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list {
		if tok.ID == day.ID && (tok.ExpiresAt == nil || tok.ExpiresAt.After(time.Now())) {
			t.Errorf("the list says it expires %v", tok.ExpiresAt)
		}
		if tok.ID == root.TokenID && tok.ExpiresAt != nil {
			t.Errorf("the operator's token expires %v", tok.ExpiresAt)
		}
	}
	if _, err := s.AuthenticateUser(ctx, rootToken); err != nil {
		t.Errorf("a token with no expiry: %v", err)
	}
}

// madeWithExpiring makes tokens with short's token, day: for ever, for a
// month, and a new user's first; each expires when day does. It returns
// the first.
func madeWithExpiring(t *testing.T, s *store.Store, short, root store.User, day store.CreatedToken) store.CreatedToken {
	t.Helper()
	ctx := context.Background()
	forever, err := s.CreateUserTokenAs(ctx, short, root.ID, store.NewToken{})
	if err != nil || forever.ExpiresAt == nil || !forever.ExpiresAt.Equal(*day.ExpiresAt) {
		t.Fatalf("a token made with it, for ever: %+v %v, want its expiry %v", forever, err, day.ExpiresAt)
	}
	month, err := s.CreateUserTokenAs(ctx, short, root.ID, store.NewToken{ExpiresInDays: 30})
	if err != nil || month.ExpiresAt == nil || !month.ExpiresAt.Equal(*day.ExpiresAt) {
		t.Fatalf("a token made with it, for a month: %+v %v, want its expiry %v", month, err, day.ExpiresAt)
	}
	if _, _, err := s.CreateUserAs(ctx, short, "newcomer", store.RoleUser); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM user_tokens t JOIN users u ON u.id = t.user_id
		WHERE u.name = 'newcomer' AND t.expires_at = $1`, *day.ExpiresAt); n != 1 {
		t.Fatal("a new user's first token made with an expiring token does not expire with it")
	}
	return forever
}
