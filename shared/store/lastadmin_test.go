package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestProjectKeepsAnAdmin: a project admin may not remove, or demote, the
// project's last admin (themselves included), or no one but a global
// admin could manage its members, secrets and environments; a global
// admin may. Two admins removing each other at once take turns: one is
// removed, the other's removal is refused, and neither meets a deadlock.
func TestProjectKeepsAnAdmin(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	root := pgtest.Admin(t, s, "root")
	p := pgtest.Project(t, s, "p")
	users := map[string]store.User{}
	for _, name := range []string{"ann", "ben"} {
		u, _, err := s.CreateUser(ctx, name, store.RoleUser)
		must(t, err)
		users[name] = u
	}
	ann, ben := users["ann"], users["ben"]
	_, err := s.SetMember(ctx, root, p.ID, "ann", store.RoleAdmin, false)
	must(t, err)
	_, err = s.SetMember(ctx, ann, p.ID, "ben", store.RoleWrite, false)
	must(t, err)
	if err := s.RemoveMember(ctx, ann, p.ID, ann.ID); !domain.Is(err, domain.EConflict) {
		t.Fatalf("the last admin removing herself: %v, want conflict", err)
	}
	if _, err := s.SetMember(ctx, ann, p.ID, "ann", store.RoleWrite, false); !domain.Is(err, domain.EConflict) {
		t.Fatalf("the last admin demoting herself: %v, want conflict", err)
	}
	_, err = s.SetMember(ctx, ann, p.ID, "ben", store.RoleAdmin, false)
	must(t, err)
	must(t, s.RemoveMember(ctx, ann, p.ID, ann.ID))
	if err := s.RemoveMember(ctx, ben, p.ID, ben.ID); !domain.Is(err, domain.EConflict) {
		t.Fatalf("the new last admin removing himself: %v, want conflict", err)
	}
	must(t, s.RemoveMember(ctx, root, p.ID, ben.ID)) // a global admin may
	for round := range 5 {
		a, b := pairOfAdmins(t, s, root, p.ID, round)
		errs := make(chan error, 2)
		go func() { errs <- s.RemoveMember(ctx, a, p.ID, b.ID) }()
		go func() { errs <- s.RemoveMember(ctx, b, p.ID, a.ID) }()
		e1, e2 := <-errs, <-errs
		if (e1 == nil) == (e2 == nil) {
			t.Fatalf("round %d: two admins removing each other: %v and %v, want one removed", round, e1, e2)
		}
		for _, err := range []error{e1, e2} {
			if err != nil && domain.ErrorCode(err) == domain.EInternal {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		var left int
		must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM project_members WHERE project_id = $1 AND role = 'admin'`, p.ID).Scan(&left))
		if left != 1 {
			t.Fatalf("round %d: %d admins left, want 1", round, left)
		}
		_, err := s.Pool().Exec(ctx, `DELETE FROM project_members WHERE project_id = $1`, p.ID)
		must(t, err)
	}
}

// pairOfAdmins makes two new users the only admins of project projectID.
func pairOfAdmins(t *testing.T, s *store.Store, root store.User, projectID string, round int) (store.User, store.User) {
	ctx := context.Background()
	var pair []store.User
	for _, name := range []string{"a", "b"} {
		u, _, err := s.CreateUser(ctx, fmt.Sprintf("%s%d", name, round), store.RoleUser)
		must(t, err)
		_, err = s.SetMember(ctx, root, projectID, u.Name, store.RoleAdmin, false)
		must(t, err)
		pair = append(pair, u)
	}
	return pair[0], pair[1]
}
