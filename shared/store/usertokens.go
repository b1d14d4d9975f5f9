package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// A user's API tokens as their owner and global admins see them: what
// each is for, what it was made with, and whether it still works, never
// the secret or its hash; and revoking one, which ends it, every token
// made with it (however deep: whoever held a leaked token cannot keep a
// copy it minted), and the dashboard sessions opened with those (a
// session is checked against its token at every request).

// userExistsSQL finds user $1, disabled or not.
const userExistsSQL = `SELECT 1 FROM users WHERE id = $1`

// listUserTokensSQL is a page of user $1's tokens, newest first (IDs are
// UUIDv7: ordered by creation), before ID $2 ("" for the first page), at
// most $3.
const listUserTokensSQL = `
SELECT id, description, created_at, revoked_at, coalesce(created_by_token, '') FROM user_tokens
WHERE user_id = $1 AND ($2 = '' OR id < $2) ORDER BY id DESC LIMIT $3`

// revokeUserTokenSQL revokes user $2's token $1 and every token made with
// it, whoever's (an admin's token makes others'); one revoked already
// keeps the time it was revoked.
const revokeUserTokenSQL = `
WITH RECURSIVE made AS (
    SELECT id FROM user_tokens WHERE id = $1 AND user_id = $2
    UNION
    SELECT t.id FROM user_tokens t JOIN made ON t.created_by_token = made.id
)
UPDATE user_tokens t SET revoked_at = coalesce(t.revoked_at, now()) FROM made WHERE t.id = made.id
RETURNING t.id, t.description, t.created_at, t.revoked_at, coalesce(t.created_by_token, '')`

// TokenInfo is one API token of a user.
type TokenInfo struct {
	ID          string     `json:"id"`
	Description string     `json:"description"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	// CreatedBy is the token it was made with ("": the operator's).
	CreatedBy string `json:"created_by_token,omitempty"`
	// AlsoRevoked, in a revocation's answer, are the tokens made with it
	// that were revoked with it.
	AlsoRevoked []string `json:"also_revoked,omitempty"`
}

// tokensCheck is who may see and revoke user userID's tokens: the user,
// while active, and global admins.
func tokensCheck(by User, userID string) check {
	if userID == by.ID {
		return byActive(by)
	}
	return byAdmin(by)
}

// ListUserTokensAs returns a page of user userID's tokens, revoked ones
// too, on behalf of by (the user or a global admin).
func (s *Store) ListUserTokensAs(ctx context.Context, by User, userID string, pg Page) ([]TokenInfo, string, error) {
	limit, after, err := pg.parse(1)
	if err != nil {
		return nil, "", err
	}
	out, err := inTxValue(ctx, s, func(tx pgx.Tx) ([]TokenInfo, error) {
		if err := tokensCheck(by, userID).run(ctx, tx); err != nil {
			return nil, err
		}
		if err := userExists(ctx, tx, userID); err != nil {
			return nil, err
		}
		rows, err := tx.Query(ctx, listUserTokensSQL, userID, after[0], limit+1)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		return pgx.CollectRows(rows, scanTokenInfo)
	})
	if err != nil {
		return nil, "", err
	}
	out, next := trim(out, limit, func(t TokenInfo) []string { return []string{t.ID} })
	return out, next, nil
}

// RevokeUserTokenAs revokes user userID's token tokenID, and every token
// made with it, on behalf of by (the user or a global admin), checked in
// the transaction of the change. A token of another user is not found,
// whatever its ID.
func (s *Store) RevokeUserTokenAs(ctx context.Context, by User, userID, tokenID string) (TokenInfo, error) {
	return inTxValue(ctx, s, func(tx pgx.Tx) (TokenInfo, error) {
		if err := tokensCheck(by, userID).run(ctx, tx); err != nil {
			return TokenInfo{}, err
		}
		rows, err := tx.Query(ctx, revokeUserTokenSQL, tokenID, userID)
		if err != nil {
			return TokenInfo{}, fmt.Errorf("revoke token: %w", err)
		}
		all, err := pgx.CollectRows(rows, scanTokenInfo)
		if err != nil {
			return TokenInfo{}, fmt.Errorf("revoke token: %w", err)
		}
		var named TokenInfo
		var also []string
		for _, t := range all {
			if t.ID == tokenID {
				named = t
			} else {
				also = append(also, t.ID)
			}
		}
		if named.ID == "" {
			return TokenInfo{}, domain.Errorf(domain.ENotFound, "user %s has no token %s", userID, tokenID)
		}
		named.AlsoRevoked = also
		return named, nil
	})
}

func userExists(ctx context.Context, tx pgx.Tx, userID string) error {
	var one int
	err := tx.QueryRow(ctx, userExistsSQL, userID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Errorf(domain.ENotFound, "user %s not found", userID)
	}
	return err
}

func scanTokenInfo(row pgx.CollectableRow) (TokenInfo, error) {
	var t TokenInfo
	err := row.Scan(&t.ID, &t.Description, &t.CreatedAt, &t.RevokedAt, &t.CreatedBy)
	return t, err
}
