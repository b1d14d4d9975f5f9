package store

import (
	"context"
	"fmt"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// Dashboard sessions (table ui_sessions). A session is opened with an API
// token and lives at most SessionTTL; every request checks it, its token
// and its user again, so a revoked token or a disabled user ends it at
// once, and signing out deletes it.

// SessionTTL is how long a dashboard session lives after sign-in.
const SessionTTL = 12 * time.Hour

const sessionPrefix = "frs_"

// openSessionSQL opens session $2 for the active token with hash $1 of an
// active user, until now() + $3 seconds, and answers who it is for. A
// session's use, its opening included, is its token's (touchTokenSQL).
const openSessionSQL = `
WITH found AS (
    SELECT t.id AS token_id, u.id AS user_id, u.name, u.role, t.token_hash FROM user_tokens t JOIN users u ON u.id = t.user_id
    WHERE t.token_hash = $1 AND ` + liveTokenSQL + ` AND u.disabled_at IS NULL
), opened AS (
    INSERT INTO ui_sessions (secret_hash, token_id, expires_at)
    SELECT $2, f.token_id, least(now() + make_interval(secs => $3), t.expires_at)
    FROM found f JOIN user_tokens t ON t.id = f.token_id
), ` + touchTokenSQL + `
SELECT user_id, name, role, token_id, encode(token_hash, 'hex') FROM found`

// authenticateSessionSQL finds the unexpired session with hash $1 of an
// active token of an active user.
const authenticateSessionSQL = `
WITH found AS (
    SELECT u.id AS user_id, u.name, u.role, t.id AS token_id, s.secret_hash
    FROM ui_sessions s JOIN user_tokens t ON t.id = s.token_id JOIN users u ON u.id = t.user_id
    WHERE s.secret_hash = $1 AND s.expires_at > now() AND ` + liveTokenSQL + ` AND u.disabled_at IS NULL
), ` + touchTokenSQL + `
SELECT user_id, name, role, token_id, encode(secret_hash, 'hex') FROM found`

// OpenSession signs in with an API token: it returns the secret of a new
// session and its user. Sessions past their time are deleted meanwhile
// (nothing else needs to run for it).
func (s *Store) OpenSession(ctx context.Context, token string) (secret string, u User, err error) {
	secret = newSecret(sessionPrefix)
	found, err := s.lookupTokenWith(ctx, token, userTokenPrefix, openSessionSQL,
		[]any{hashSecret(secret), SessionTTL.Seconds()}, &u.ID, &u.Name, &u.Role, &u.TokenID)
	if err != nil {
		return "", User{}, fmt.Errorf("open session: %w", err)
	}
	if !found {
		return "", User{}, domain.Errorf(domain.EUnauthorized, "API token is missing, unknown, revoked or expired")
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM ui_sessions WHERE expires_at < now()`); err != nil {
		return "", User{}, fmt.Errorf("open session: %w", err)
	}
	return secret, u, nil
}

// AuthenticateSession returns the user of a live session.
func (s *Store) AuthenticateSession(ctx context.Context, secret string) (User, error) {
	var u User
	found, err := s.lookupToken(ctx, secret, sessionPrefix, authenticateSessionSQL, &u.ID, &u.Name, &u.Role, &u.TokenID)
	if err != nil {
		return User{}, fmt.Errorf("authenticate session: %w", err)
	}
	if !found {
		return User{}, domain.Errorf(domain.EUnauthorized, "the session is unknown, over, or of a revoked token or disabled user")
	}
	return u, nil
}

// CloseSession deletes a session (signing out); an unknown one is no error.
func (s *Store) CloseSession(ctx context.Context, secret string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM ui_sessions WHERE secret_hash = $1`, hashSecret(secret)); err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}
