package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Authorization: a user token says who is calling; what they may do comes
// from their current relation to the project of the thing touched. The rank
// is defined once, by the SQL function project_rank (migration 00005):
// reads put it in their WHERE clause, changes call authorize in their own
// transaction. A read's condition "user $N may read the project of column
// col" is written in its statement as project_rank($N, col) >= 1 (RankRead).

// globalAdminSQL reads, holding the row, whether active user $1 is a
// global admin.
const globalAdminSQL = `SELECT role = 'admin' FROM users WHERE id = $1 AND disabled_at IS NULL FOR SHARE`

// membershipSQL reads, holding the row, user $2's membership of project $1.
const membershipSQL = `SELECT role, secrets FROM project_members WHERE project_id = $1 AND user_id = $2 FOR SHARE`

// runProjectSQL is the project of run $1.
const runProjectSQL = `SELECT project_id FROM runs WHERE id = $1`

// Ranks on a project, weakest first (project_rank's values).
const (
	RankNone  = 0
	RankRead  = 1
	RankWrite = 2
	RankAdmin = 3
)

var rankOfRole = map[string]int{RoleRead: RankRead, RoleWrite: RankWrite, RoleAdmin: RankAdmin}

var roleOfRank = map[int]string{RankRead: RoleRead, RankWrite: RoleWrite, RankAdmin: RoleAdmin}

// Access is what one user may do in one project.
type Access struct {
	Rank int
	// Secrets: runs this user starts are trusted (get the project's
	// secrets). Global admins have it everywhere.
	Secrets bool
}

// authorize reads the user's access to a project inside tx and holds it:
// the membership row (or, for a global admin, the user row) is locked FOR
// SHARE until tx ends, so a removal or demotion made meanwhile waits for
// the change being authorised, or is seen by it; never half of each.
// Without read access the answer is ENotFound (what), as if the thing did
// not exist; with read but less than need it is EForbidden.
func authorize(ctx context.Context, tx pgx.Tx, u User, projectID string, need int, what string) (Access, error) {
	var a Access
	var globalAdmin bool
	err := tx.QueryRow(ctx, globalAdminSQL, u.ID).Scan(&globalAdmin)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, domain.Errorf(domain.EUnauthorized, "user is disabled")
	}
	if err != nil {
		return a, fmt.Errorf("authorize: %w", err)
	}
	var role string
	err = tx.QueryRow(ctx, membershipSQL, projectID, u.ID).Scan(&role, &a.Secrets)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("authorize: %w", err)
	}
	a.Rank = rankOfRole[role]
	if globalAdmin {
		a = Access{Rank: RankAdmin, Secrets: true}
	}
	switch {
	case a.Rank == RankNone:
		return a, domain.Errorf(domain.ENotFound, "%s not found", what)
	case a.Rank < need:
		return a, domain.Errorf(domain.EForbidden, "this needs the %s role in the project; you have %s", roleOfRank[need], roleOfRank[a.Rank])
	}
	return a, nil
}

// requireGlobalAdmin checks, holding the user row, that u is a global admin.
func requireGlobalAdmin(ctx context.Context, tx pgx.Tx, u User) error {
	var admin bool
	err := tx.QueryRow(ctx, globalAdminSQL, u.ID).Scan(&admin)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Errorf(domain.EUnauthorized, "user is disabled")
	}
	if err != nil {
		return fmt.Errorf("check admin: %w", err)
	}
	if !admin {
		return domain.Errorf(domain.EForbidden, "only global admins may do this")
	}
	return nil
}

// check is a permission checked first in the transaction that makes a
// change, so that it holds until the change commits. The operator's calls
// (the admin function, the CLI) have none: their authority is not a
// user's.
type check func(ctx context.Context, tx pgx.Tx) error

// byAdmin is the check of a global admin's change: u is still an active
// global admin (requireGlobalAdmin, holding the user row). An admin
// disabled or demoted while the request was read changes nothing.
func byAdmin(u User) check {
	return func(ctx context.Context, tx pgx.Tx) error { return requireGlobalAdmin(ctx, tx, u) }
}

// holdActiveUserSQL holds user $1's row while the user is active.
const holdActiveUserSQL = `SELECT 1 FROM users WHERE id = $1 AND disabled_at IS NULL FOR SHARE`

// byActive is the check of a change anyone may make for themselves: u is
// still active, holding the user row.
func byActive(u User) check {
	return func(ctx context.Context, tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, holdActiveUserSQL, u.ID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.EUnauthorized, "user is disabled")
		}
		if err != nil {
			return fmt.Errorf("check user: %w", err)
		}
		return nil
	}
}

func (c check) run(ctx context.Context, tx pgx.Tx) error {
	if c == nil {
		return nil
	}
	return c(ctx, tx)
}

// runProject returns the project of a run, locking nothing.
func runProject(ctx context.Context, tx pgx.Tx, runID string) (string, error) {
	var projectID string
	err := tx.QueryRow(ctx, runProjectSQL, runID).Scan(&projectID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", domain.Errorf(domain.ENotFound, "run %s not found", runID)
	}
	if err != nil {
		return "", fmt.Errorf("run %s: %w", runID, err)
	}
	return projectID, nil
}

// authorizeRun is authorize for the project of a run.
func authorizeRun(ctx context.Context, tx pgx.Tx, u User, runID string, need int) (string, Access, error) {
	projectID, err := runProject(ctx, tx, runID)
	if err != nil {
		return "", Access{}, err
	}
	a, err := authorize(ctx, tx, u, projectID, need, "run "+runID)
	return projectID, a, err
}

// AccessTo returns a user's access to a project (by ID), or ENotFound when
// they cannot read it.
func (s *Store) AccessTo(ctx context.Context, u User, projectID string) (Access, error) {
	var a Access
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		a, err = authorize(ctx, tx, u, projectID, RankRead, "project "+projectID)
		return err
	})
	return a, err
}
