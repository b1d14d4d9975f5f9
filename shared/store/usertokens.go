package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
SELECT ` + tokenInfoColumns + ` FROM user_tokens
WHERE user_id = $1 AND ($2 = '' OR id < $2) ORDER BY id DESC LIMIT $3`

// tokenOfUserSQL finds user $2's token $1.
const tokenOfUserSQL = `SELECT 1 FROM user_tokens WHERE id = $1 AND user_id = $2`

// revokeTreeSQL revokes tokens $1 and every token made with them, however
// deep, in one statement; one revoked already keeps the time it was
// revoked.
const revokeTreeSQL = `
WITH RECURSIVE tree (tid) AS (
    SELECT unnest($1::text[])
    UNION
    SELECT t.id FROM user_tokens t JOIN tree ON t.created_by_token = tree.tid
)
UPDATE user_tokens SET revoked_at = coalesce(revoked_at, now()) FROM tree WHERE id = tree.tid
RETURNING ` + tokenInfoColumns

// tokenInfoColumns are a TokenInfo's (scanTokenInfo).
const tokenInfoColumns = `id, description, created_at, revoked_at, coalesce(created_by_token, ''), last_used_at, expires_at`

// treePlanSQL makes the transaction's queries follow the tree by its
// index, a token at a time: a plan that hashes or scans the whole table
// at each level costs the square of a chain's length (a 20,000-deep chain,
// made to outlast the function's timeout, took 30 s so).
const treePlanSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true)`

// madeSinceSQL lists the live tokens made with tokens $1: made while
// revokeTreeSQL waited for their making (see revokeTree).
const madeSinceSQL = `SELECT id FROM user_tokens WHERE created_by_token = ANY ($1) AND revoked_at IS NULL`

// liveRunnersRegisteredSQL lists the runners, not revoked, that registered
// with registration tokens made with user tokens $1.
const liveRunnersRegisteredSQL = `
SELECT DISTINCT ru.id FROM registration_tokens r JOIN runners ru ON ru.id = r.used_by_runner
WHERE r.created_by_token = ANY ($1) AND ru.revoked_at IS NULL ORDER BY ru.id`

// expireRegistrationsSQL expires the unused registration tokens made with
// user tokens $1.
const expireRegistrationsSQL = `
UPDATE registration_tokens SET expires_at = now()
WHERE created_by_token = ANY ($1) AND used_at IS NULL AND expires_at > now()`

// removeSchedulesSQL deletes the schedules that runs made with tokens $1
// set, or whose run's snapshot was submitted with one, naming each
// "<project>: <cron>" where user $2 ("": the operator) may read the
// project (NULL elsewhere: a token's tree can hold other users' tokens,
// and a user may have left a project since).
const removeSchedulesSQL = `
DELETE FROM schedules s USING projects p
WHERE p.id = s.project_id
  AND (s.set_by_token = ANY ($1)
       OR EXISTS (SELECT 1 FROM runs r WHERE r.id = s.template_run_id AND r.source_token = ANY ($1)))
RETURNING CASE WHEN $2 = '' OR project_rank($2, p.id) >= 1 THEN p.name || ': ' || s.cron END`

// holdLiveTokenSQL holds token $1 while it works (not revoked, not
// expired): the token a new one is made with.
const holdLiveTokenSQL = `SELECT 1 FROM user_tokens t WHERE t.id = $1 AND ` + liveTokenSQL + ` FOR SHARE`

// TokenInfo is one API token of a user.
type TokenInfo struct {
	ID          string     `json:"id"`
	Description string     `json:"description"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	// LastUsedAt is when a request, or a dashboard session opened with
	// it, last used it, to the hour; nil: never.
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	// ExpiresAt is when it stops working (nil: when revoked).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// CreatedBy is the token it was made with ("": the operator's).
	CreatedBy string `json:"created_by_token,omitempty"`
	// AlsoRevoked, in a revocation's answer, are the tokens made with it
	// that were revoked with it.
	AlsoRevoked []string `json:"also_revoked,omitempty"`
	// Revoked, in a revocation's answer: what it left and removed.
	Revoked
}

// Revoked is what revoking a tree of tokens (one, or a disabled user's)
// left to check and removed.
type Revoked struct {
	// RunnersToCheck are the runners that registered with registration
	// tokens these tokens made: they stay registered (a routine rotation
	// must not stop the runners an admin set up), for the operator to
	// revoke if the token leaked.
	RunnersToCheck []string `json:"runners_to_check,omitempty"`
	// SchedulesRemoved are the schedules ("<project>: <cron>") set by runs
	// made with these tokens, or of snapshots submitted with them: a
	// schedule runs its snapshot again with the project's secrets, so a
	// leaked token's must not outlive it. A submit from the default branch
	// with a token that works sets them again.
	SchedulesRemoved []string `json:"schedules_removed,omitempty"`
}

// revocation is what revoking a tree of tokens did.
type revocation struct {
	tokens []TokenInfo
	Revoked
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
	may := func(ctx context.Context, tx pgx.Tx) error {
		if err := tokensCheck(by, userID).run(ctx, tx); err != nil {
			return err
		}
		return userExists(ctx, tx, userID)
	}
	return checkedPage(ctx, s, may, pg, "list tokens", listUserTokensSQL, []any{userID}, scanTokenInfo,
		func(t TokenInfo) string { return t.ID })
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
		var one int
		err := tx.QueryRow(ctx, tokenOfUserSQL, tokenID, userID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return TokenInfo{}, domain.Errorf(domain.ENotFound, "user %s has no token %s", userID, tokenID)
		}
		if err != nil {
			return TokenInfo{}, fmt.Errorf("revoke token: %w", err)
		}
		rev, err := revokeTree(ctx, tx, []string{tokenID}, by.ID)
		if err != nil {
			return TokenInfo{}, err
		}
		var named TokenInfo
		var also []string
		for _, t := range rev.tokens {
			if t.ID == tokenID {
				named = t
			} else {
				also = append(also, t.ID)
			}
		}
		named.AlsoRevoked, named.Revoked = also, rev.Revoked
		return named, nil
	})
}

// revokeTree revokes tokens ids and every token made with them, however
// deep, expires the unused registration tokens any of them made and
// removes the schedules their runs set. The tree's update waits for a
// token being made with one of its tokens (its making holds the parent FOR
// SHARE, holdLiveTokenSQL) but, its tree read before, misses it; the next
// statement sees it, and it is revoked with its own tree in another round.
// A token's making that comes after the update finds its parent revoked;
// so does a schedule's setting or firing, and a run's making from a
// snapshot or inputs given with one; the unfinished runs that were are
// marked, so that the claim hands out none of their trusted jobs. It
// returns the tokens revoked, the live runners registered with
// registration tokens they made and the schedules removed, named as user
// by ("": the operator) may see them.
func revokeTree(ctx context.Context, tx pgx.Tx, ids []string, by string) (revocation, error) {
	var rev revocation
	var allIDs []string
	if _, err := tx.Exec(ctx, treePlanSQL); err != nil {
		return rev, fmt.Errorf("revoke tokens: %w", err)
	}
	for len(ids) > 0 {
		rows, err := tx.Query(ctx, revokeTreeSQL, ids)
		if err != nil {
			return rev, fmt.Errorf("revoke tokens: %w", err)
		}
		revoked, err := pgx.CollectRows(rows, scanTokenInfo)
		if err != nil {
			return rev, fmt.Errorf("revoke tokens: %w", err)
		}
		rev.tokens = append(rev.tokens, revoked...)
		for _, t := range revoked {
			allIDs = append(allIDs, t.ID)
		}
		if _, err := tx.Exec(ctx, expireRegistrationsSQL, allIDs); err != nil {
			return rev, fmt.Errorf("expire registration tokens: %w", err)
		}
		if ids, err = queryIDs(ctx, tx, madeSinceSQL, allIDs); err != nil {
			return rev, fmt.Errorf("tokens made with tokens: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, markRevokedRunsSQL, allIDs); err != nil {
		return rev, fmt.Errorf("runs given with tokens: %w", err)
	}
	var err error
	if rev.RunnersToCheck, err = queryIDs(ctx, tx, liveRunnersRegisteredSQL, allIDs); err != nil {
		return rev, fmt.Errorf("runners registered with tokens: %w", err)
	}
	if rev.SchedulesRemoved, err = removeSchedules(ctx, tx, allIDs, by); err != nil {
		return rev, err
	}
	return rev, nil
}

// removeSchedules deletes the schedules runs made with tokens ids set and
// names them, sorted, as user by may see them (removeSchedulesSQL).
func removeSchedules(ctx context.Context, tx pgx.Tx, ids []string, by string) ([]string, error) {
	rows, err := tx.Query(ctx, removeSchedulesSQL, ids, by)
	if err != nil {
		return nil, fmt.Errorf("schedules set with tokens: %w", err)
	}
	named, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return nil, fmt.Errorf("schedules set with tokens: %w", err)
	}
	var out []string
	hidden := 0
	for _, n := range named {
		if n == nil {
			hidden++
		} else {
			out = append(out, *n)
		}
	}
	slices.Sort(out)
	if hidden > 0 {
		out = append(out, fmt.Sprintf("%d in projects you cannot read", hidden))
	}
	return out, nil
}

// markRevokedRunsSQL marks the unfinished runs whose snapshot or inputs
// were given with tokens $1: the claim (authorsMaySQL, membersMaySQL) and
// the heartbeat (cancelAskedSQL) read the mark off the run's row.
// A run being made with one holds it (runMakers), so is marked once made.
const markRevokedRunsSQL = `
UPDATE runs SET token_revoked = true
WHERE finished_at IS NULL AND NOT token_revoked AND (source_token = ANY ($1) OR inputs_token = ANY ($1))`

// holdUnrevokedTokenSQL holds token $1 while it is not revoked: what a
// token left running (a schedule its run set, a snapshot it submitted)
// lasts until its revocation, not its expiry, which only ends its use.
const holdUnrevokedTokenSQL = `SELECT 1 FROM user_tokens WHERE id = $1 AND revoked_at IS NULL FOR SHARE`

// holdUnrevokedToken answers EForbidden, saying what was done with it and
// what to do, when token tokenID ("": none) was revoked, and holds it
// until the commit otherwise.
func holdUnrevokedToken(ctx context.Context, tx pgx.Tx, tokenID, what, todo string) error {
	if tokenID == "" {
		return nil
	}
	var one int
	err := tx.QueryRow(ctx, holdUnrevokedTokenSQL, tokenID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Errorf(domain.EForbidden, "%s with an API token since revoked: %s", what, todo)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// holdLiveToken refuses the making of a token with a token revoked since
// the request was authenticated, and holds it until the new one commits.
func holdLiveToken(ctx context.Context, tx pgx.Tx, tokenID string) error {
	if tokenID == "" {
		return nil
	}
	var one int
	err := tx.QueryRow(ctx, holdLiveTokenSQL, tokenID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Errorf(domain.EUnauthorized, "the API token of this request was revoked or has expired")
	}
	return err
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
	err := row.Scan(&t.ID, &t.Description, &t.CreatedAt, &t.RevokedAt, &t.CreatedBy, &t.LastUsedAt, &t.ExpiresAt)
	return t, err
}
