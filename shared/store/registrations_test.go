package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRegistrationTokens: global admins list the registration tokens,
// newest first, with who made each, whether it expired and which runner
// it registered; revoking an unused one ends it at once, one used is a
// conflict naming its runner; others may do neither.
func TestRegistrationTokens(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	_, secret, err := s.CreateUser(ctx, "root", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.AuthenticateUser(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err = s.CreateUser(ctx, "u", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	user, err := s.AuthenticateUser(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(description string) string {
		tok, _, err := s.CreateRegistrationTokenAs(ctx, root, time.Hour, description, store.Scope{Projects: []string{"p"}})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	used := mint("used")
	mint("old")
	leaked := mint("leaked")
	runnerID, _, err := s.RegisterRunner(ctx, used, "box", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE registration_tokens SET expires_at = now() - interval '1 minute' WHERE description = 'old'`); err != nil {
		t.Fatal(err)
	}
	list, _, err := s.ListRegistrationTokensAs(ctx, root, store.Page{})
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %+v %v", list, err)
	}
	byName := map[string]store.RegistrationInfo{}
	for _, r := range list {
		byName[r.Description] = r
	}
	if list[0].Description != "leaked" || byName["used"].UsedByRunner != runnerID || !byName["old"].Expired ||
		byName["leaked"].Expired || byName["leaked"].CreatedBy != "root" || strings.Join(byName["leaked"].ProjectNames, ",") != "p" {
		t.Fatalf("list: %+v", list)
	}
	info, err := s.RevokeRegistrationTokenAs(ctx, root, byName["leaked"].ID)
	if err != nil || !info.Expired {
		t.Fatalf("revoke an unused token: %+v %v", info, err)
	}
	if _, _, err := s.RegisterRunner(ctx, leaked, "late", nil); !domain.Is(err, domain.EUnauthorized) {
		t.Errorf("a revoked registration token registers: %v", err)
	}
	if _, err := s.RevokeRegistrationTokenAs(ctx, root, byName["leaked"].ID); err != nil {
		t.Errorf("revoking it again: %v", err)
	}
	if _, err := s.RevokeRegistrationTokenAs(ctx, root, byName["used"].ID); !domain.Is(err, domain.EConflict) || !strings.Contains(err.Error(), runnerID) {
		t.Errorf("revoking a used token: %v, want a conflict naming runner %s", err, runnerID)
	}
	if _, err := s.RevokeRegistrationTokenAs(ctx, root, "no-such-token"); !domain.Is(err, domain.ENotFound) {
		t.Errorf("revoking a token that does not exist: %v", err)
	}
	if _, _, err := s.ListRegistrationTokensAs(ctx, user, store.Page{}); !domain.Is(err, domain.EForbidden) {
		t.Errorf("a user lists registration tokens: %v", err)
	}
	if _, err := s.RevokeRegistrationTokenAs(ctx, user, byName["old"].ID); !domain.Is(err, domain.EForbidden) {
		t.Errorf("a user revokes a registration token: %v", err)
	}
}
