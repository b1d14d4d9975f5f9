package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Users and their API tokens: who people are and how they authenticate.
// What they may do in a project is in authz.go.

const insertUserSQL = `INSERT INTO users (id, name, role) VALUES ($1, $2, $3)`

// insertFirstTokenSQL gives new user $2 its first token; $4 is the token
// it is made with (empty: the operator's call), whose expiry it keeps.
const insertFirstTokenSQL = `
INSERT INTO user_tokens (id, user_id, token_hash, description, created_by_token, expires_at)
VALUES ($1, $2, $3, 'first token', nullif($4, ''), ` + madeWithExpiry4SQL + `)`

// liveTokenSQL is the condition of user_tokens t that it works: not
// revoked, not expired.
const liveTokenSQL = `t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())`

// madeWithExpiry4SQL and madeWithExpiry5SQL are the expiry of token $4
// or $5 a new token is made with (NULL: none, or it never expires): the
// new one's is no later.
const (
	madeWithExpiry4SQL = `(SELECT p.expires_at FROM user_tokens p WHERE p.id = nullif($4, ''))`
	madeWithExpiry5SQL = `(SELECT p.expires_at FROM user_tokens p WHERE p.id = nullif($5, ''))`
)

// authenticateUserSQL finds the active token with hash $1 of an active
// user, and notes its use (touchTokenSQL).
const authenticateUserSQL = `
WITH found AS (
    SELECT u.id AS user_id, u.name, u.role, t.id AS token_id, t.token_hash FROM user_tokens t JOIN users u ON u.id = t.user_id
    WHERE t.token_hash = $1 AND ` + liveTokenSQL + ` AND u.disabled_at IS NULL
), ` + touchTokenSQL + `
SELECT user_id, name, role, token_id, encode(token_hash, 'hex') FROM found`

// touchTokenSQL, a clause of a WITH whose "found" has the token's
// token_id, notes that the token was used: to the hour, so that a busy
// token costs one write an hour, not one a request; in the request's own
// statement, so no second round trip.
const touchTokenSQL = `touched AS (
    UPDATE user_tokens SET last_used_at = now() WHERE id = (SELECT token_id FROM found)
    AND (last_used_at IS NULL OR last_used_at < now() - interval '1 hour')
)`

// listUsersSQL is a page of the users by name, after $1, at most $2, with
// how many active tokens each has.
const listUsersSQL = `
SELECT u.id, u.name, u.role, u.created_at, u.disabled_at,
       (SELECT count(*) FROM user_tokens t WHERE t.user_id = u.id AND ` + liveTokenSQL + `)
FROM users u WHERE u.name > $1 ORDER BY u.name LIMIT $2`

// insertTokenSQL gives user $2 token $1 only if the user is active; $5
// is the token it is made with (”: none, the operator's call), and it
// expires in $6 days (NULL: never), no later than that one. least()
// passes over NULLs.
const insertTokenSQL = `
INSERT INTO user_tokens (id, user_id, token_hash, description, created_by_token, expires_at)
SELECT $1, id, $3, $4, nullif($5, ''), least(now() + make_interval(days => $6::int), ` + madeWithExpiry5SQL + `)
FROM users WHERE id = $2 AND disabled_at IS NULL
RETURNING expires_at`

const disableUserSQL = `UPDATE users SET disabled_at = coalesce(disabled_at, now()) WHERE id = $1`

// userTokensSQL lists user $1's tokens: disabling the user revokes them
// and the tokens made with them (revokeTree), so that a token minted with
// a leaked admin token for someone else goes too.
const userTokensSQL = `SELECT id FROM user_tokens WHERE user_id = $1`

const userTokenPrefix = "fru_"

// Roles. A user's global role is RoleAdmin (everything, everywhere) or
// RoleUser (what their project memberships give); a membership's role is
// RoleRead, RoleWrite or RoleAdmin of that project.
const (
	RoleUser  = "user"
	RoleRead  = "read"
	RoleWrite = "write"
	RoleAdmin = "admin"
)

// User is an authenticated person.
type User struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role"` // global: admin or user
	// TokenID is the API token the user authenticated with (that of the
	// dashboard session): tokens made with it are revoked with it.
	TokenID string `json:"-"`
}

// IsAdmin reports whether the user is a global admin.
func (u User) IsAdmin() bool { return u.Role == RoleAdmin }

// CreateUser makes a user with a first API token, returned once. It is
// the operator's call (the admin function, the CLI); people go through
// CreateUserAs.
func (s *Store) CreateUser(ctx context.Context, name, role string) (User, string, error) {
	return s.createUser(ctx, nil, "", name, role)
}

// CreateUserAs makes a user on behalf of by, who must be a global admin.
// The first token is made with by's API token, and is revoked with it.
func (s *Store) CreateUserAs(ctx context.Context, by User, name, role string) (User, string, error) {
	return s.createUser(ctx, byAdmin(by), by.TokenID, name, role)
}

func (s *Store) createUser(ctx context.Context, may check, madeWith, name, role string) (User, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 100 {
		return User{}, "", domain.Errorf(domain.EInvalid, "user name must be 1 to 100 characters")
	}
	switch role {
	case RoleAdmin, RoleUser:
	case RoleRead, RoleWrite:
		return User{}, "", domain.Errorf(domain.EInvalid,
			"role %q is per project now: make the user with role user, then add them to projects (forgeci project member add)", role)
	default:
		return User{}, "", domain.Errorf(domain.EInvalid, "role must be admin or user")
	}
	u := User{ID: uuid.Must(uuid.NewV7()).String(), Name: name, Role: role}
	token := newSecret(userTokenPrefix)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := may.run(ctx, tx); err != nil {
			return err
		}
		if err := holdLiveToken(ctx, tx, madeWith); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertUserSQL, u.ID, u.Name, u.Role); err != nil {
			if isUniqueViolation(err) {
				return domain.Errorf(domain.EConflict, "a user named %q exists", name)
			}
			return fmt.Errorf("insert user: %w", err)
		}
		_, err := tx.Exec(ctx, insertFirstTokenSQL, uuid.Must(uuid.NewV7()).String(), u.ID, hashSecret(token), madeWith)
		return err
	})
	if err != nil {
		return User{}, "", err
	}
	return u, token, nil
}

// AuthenticateUser maps an API token to its user.
func (s *Store) AuthenticateUser(ctx context.Context, token string) (User, error) {
	var u User
	found, err := s.lookupToken(ctx, token, userTokenPrefix, authenticateUserSQL, &u.ID, &u.Name, &u.Role, &u.TokenID)
	if err != nil {
		return User{}, fmt.Errorf("authenticate user: %w", err)
	}
	if !found {
		return User{}, domain.Errorf(domain.EUnauthorized, "API token is missing, unknown, revoked or expired")
	}
	return u, nil
}

// UserInfo is a user as admins see it.
type UserInfo struct {
	User
	CreatedAt  time.Time  `json:"created_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	Tokens     int        `json:"active_tokens"`
}

// ListUsers returns a page of the users, by name.
func (s *Store) ListUsers(ctx context.Context, pg Page) ([]UserInfo, string, error) {
	limit, after, err := pg.parse(1)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, listUsersSQL, after[0], limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list users: %w", err)
	}
	us, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UserInfo, error) {
		var u UserInfo
		err := row.Scan(&u.ID, &u.Name, &u.Role, &u.CreatedAt, &u.DisabledAt, &u.Tokens)
		return u, err
	})
	if err != nil {
		return nil, "", err
	}
	us, next := trim(us, limit, func(u UserInfo) []string { return []string{u.Name} })
	return us, next, nil
}

// CreateUserToken gives a user another API token, returned once: the
// operator's call. It never expires.
func (s *Store) CreateUserToken(ctx context.Context, userID, description string) (id, token string, err error) {
	t, err := s.createUserToken(ctx, nil, "", userID, NewToken{Description: description})
	return t.ID, t.Token, err
}

// NewToken is a token being made: what it is for, and how many days it
// works (0: until revoked).
type NewToken struct {
	Description   string `json:"description"`
	ExpiresInDays int    `json:"expires_in_days"`
}

// CreatedToken is a token just made: its secret, shown once.
type CreatedToken struct {
	ID        string     `json:"id"`
	Token     string     `json:"token"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// MaxTokenDays bounds a token's life when one is given.
const MaxTokenDays = 3650

// CreateUserTokenAs gives a user another API token on behalf of by: a
// global admin for anyone, anyone for themselves while active (the user
// row is held, so a user disabled meanwhile gets none: the disabling
// waits, or is seen). It expires no later than by's token.
func (s *Store) CreateUserTokenAs(ctx context.Context, by User, userID string, nt NewToken) (CreatedToken, error) {
	return s.createUserToken(ctx, tokensCheck(by, userID), by.TokenID, userID, nt)
}

func (s *Store) createUserToken(ctx context.Context, may check, madeWith, userID string, nt NewToken) (CreatedToken, error) {
	description := strings.TrimSpace(nt.Description)
	if len(description) > 200 {
		return CreatedToken{}, domain.Errorf(domain.EInvalid, "description is at most 200 characters")
	}
	if nt.ExpiresInDays < 0 || nt.ExpiresInDays > MaxTokenDays {
		return CreatedToken{}, domain.Errorf(domain.EInvalid, "expires_in_days must be from 1 to %d (0 or none: until revoked)", MaxTokenDays)
	}
	var days *int
	if nt.ExpiresInDays > 0 {
		days = &nt.ExpiresInDays
	}
	t := CreatedToken{ID: uuid.Must(uuid.NewV7()).String(), Token: newSecret(userTokenPrefix)}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := may.run(ctx, tx); err != nil {
			return err
		}
		if err := holdLiveToken(ctx, tx, madeWith); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, insertTokenSQL, t.ID, userID, hashSecret(t.Token), description, madeWith, days).Scan(&t.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.ENotFound, "no active user %s", userID)
		}
		if err != nil {
			return fmt.Errorf("create token: %w", err)
		}
		return nil
	})
	if err != nil {
		return CreatedToken{}, err
	}
	return t, nil
}

// lockUsersSQL takes users $1 in one order, so that two admins disabling
// each other wait for one another instead of deadlocking: the second then
// finds itself disabled. FOR NO KEY UPDATE, the lock the UPDATE takes
// anyway: FOR UPDATE would also block the foreign-key checks of rows that
// name the user (a token, a membership), a deadlock with an admin who
// makes one for this one while being disabled.
const lockUsersSQL = `SELECT id FROM users WHERE id = ANY ($1) ORDER BY id FOR NO KEY UPDATE`

// DisableUser disables a user and revokes every token of theirs, and the
// tokens made with them: the operator's call.
func (s *Store) DisableUser(ctx context.Context, userID string) error {
	_, err := s.disableUser(ctx, nil, "", userID)
	return err
}

// DisableUserAs disables a user on behalf of by, who must be a global
// admin. It returns what revoking the user's tokens left to check and
// removed.
func (s *Store) DisableUserAs(ctx context.Context, by User, userID string) (Revoked, error) {
	return s.disableUser(ctx, byAdmin(by), by.ID, userID)
}

// disableUser disables userID after locking it and by (the acting admin;
// "": the operator) in one order.
func (s *Store) disableUser(ctx context.Context, may check, by, userID string) (Revoked, error) {
	return inTxValue(ctx, s, func(tx pgx.Tx) (Revoked, error) {
		lock := []string{userID}
		if by != "" {
			lock = append(lock, by)
		}
		if _, err := tx.Exec(ctx, lockUsersSQL, lock); err != nil {
			return Revoked{}, fmt.Errorf("lock users: %w", err)
		}
		if err := may.run(ctx, tx); err != nil {
			return Revoked{}, err
		}
		tag, err := tx.Exec(ctx, disableUserSQL, userID)
		if err != nil {
			return Revoked{}, err
		}
		if tag.RowsAffected() == 0 {
			return Revoked{}, domain.Errorf(domain.ENotFound, "user %s not found", userID)
		}
		ids, err := queryIDs(ctx, tx, userTokensSQL, userID)
		if err != nil {
			return Revoked{}, fmt.Errorf("tokens of user: %w", err)
		}
		rev, err := revokeTree(ctx, tx, ids, by)
		return rev.Revoked, err
	})
}
