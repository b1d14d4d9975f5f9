package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

func unauthorized(err error) bool {
	var de *domain.Error
	return errors.As(err, &de) && de.Code == domain.EUnauthorized
}

// TestSessions: signing in with an API token opens a session whose secret
// is not the token and is no API credential, nor the token a session's;
// the session ends at sign-out, at its expiry, when its token is revoked
// and when its user is disabled, each checked at the next request; an
// expired session's row goes at the next sign-in.
func TestSessions(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	u, token, err := s.CreateUser(ctx, "ana", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OpenSession(ctx, token+"x"); !unauthorized(err) {
		t.Fatalf("a session for an unknown token: %v", err)
	}
	open := func() string {
		t.Helper()
		secret, who, err := s.OpenSession(ctx, token)
		if err != nil || who.ID != u.ID || secret == token || !strings.HasPrefix(secret, "frs_") {
			t.Fatalf("open: %q %+v %v", secret, who, err)
		}
		if who, err := s.AuthenticateSession(ctx, secret); err != nil || who.ID != u.ID {
			t.Fatalf("a new session: %+v %v", who, err)
		}
		return secret
	}
	live := func(secret string) bool {
		_, err := s.AuthenticateSession(ctx, secret)
		if err != nil && !unauthorized(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	secret := open()
	if _, err := s.AuthenticateUser(ctx, secret); !unauthorized(err) {
		t.Fatalf("a session's secret taken as an API token: %v", err)
	}
	if _, err := s.AuthenticateSession(ctx, token); !unauthorized(err) {
		t.Fatalf("an API token taken as a session: %v", err)
	}
	if err := s.CloseSession(ctx, secret); err != nil || live(secret) {
		t.Fatalf("signed out, the session still works (%v)", err)
	}

	secret = open()
	if _, err := s.Pool().Exec(ctx, `UPDATE ui_sessions SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if live(secret) {
		t.Fatal("an expired session works")
	}
	secret = open() // and the expired one's row is gone
	var rows int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM ui_sessions`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d sessions after signing in again (%v), want the new one only", rows, err)
	}

	if _, err := s.Pool().Exec(ctx, `UPDATE user_tokens SET revoked_at = now() WHERE user_id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	if live(secret) {
		t.Fatal("the session of a revoked token works")
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE user_tokens SET revoked_at = NULL WHERE user_id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	secret = open()
	// (DisableUser revokes the tokens as well; this is the user alone.)
	if _, err := s.Pool().Exec(ctx, `UPDATE users SET disabled_at = now() WHERE id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	if live(secret) {
		t.Fatal("the session of a disabled user works")
	}
}
