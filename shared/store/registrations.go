package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Runner registration tokens as global admins see them: what each was for,
// who made it, its scope, and whether it was used (by which runner),
// expired or revoked; never the secret or its hash. Revoking one that is
// not used yet ends it at once (a leaked one, say); a used one has done its
// work, and it is its runner that is revoked.

// registrationColumns are a RegistrationInfo's (scanRegistration).
const registrationColumns = `r.id, r.description, r.created_at, r.expires_at, r.used_at, coalesce(r.used_by_runner, ''),
       coalesce((SELECT array_agg(p.name ORDER BY p.name) FROM projects p WHERE p.id = ANY (r.projects)), '{}'),
       r.untrusted, r.untrusted_only, coalesce(u.name, ''), r.expires_at <= now()`

// registrationsFrom joins each registration token to the user whose
// token made it.
const registrationsFrom = `
FROM registration_tokens r LEFT JOIN user_tokens t ON t.id = r.created_by_token LEFT JOIN users u ON u.id = t.user_id`

// listRegistrationsSQL is a page of the registration tokens, newest first
// (IDs are UUIDv7), before ID $1 (empty for the first page), at most $2.
const listRegistrationsSQL = `
SELECT ` + registrationColumns + registrationsFrom + `
WHERE $1 = '' OR r.id < $1 ORDER BY r.id DESC LIMIT $2`

// revokeRegistrationSQL ends registration token $1 if it is unused and
// unexpired.
const revokeRegistrationSQL = `
UPDATE registration_tokens SET expires_at = now() WHERE id = $1 AND used_at IS NULL AND expires_at > now()`

// registrationSQL reads registration token $1.
const registrationSQL = `
SELECT ` + registrationColumns + registrationsFrom + `
WHERE r.id = $1`

// RegistrationInfo is a runner registration token.
type RegistrationInfo struct {
	ID          string    `json:"id"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	// CreatedBy is the user whose API token made it ("": the operator's
	// call, the admin function or the CLI on the database).
	CreatedBy string    `json:"created_by,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	// Expired: it can no longer register a runner (its time passed, or it
	// was revoked, or the token that made it was).
	Expired bool `json:"expired"`
	// UsedAt and UsedByRunner: it registered that runner.
	UsedAt       *time.Time `json:"used_at,omitempty"`
	UsedByRunner string     `json:"used_by_runner,omitempty"`
	// The scope it hands its runner (no projects: every project).
	ProjectNames  []string `json:"project_names"`
	Untrusted     bool     `json:"untrusted"`
	UntrustedOnly bool     `json:"untrusted_only"`
}

// ListRegistrationTokensAs returns a page of the registration tokens,
// newest first, on behalf of by, who must be a global admin.
func (s *Store) ListRegistrationTokensAs(ctx context.Context, by User, pg Page) ([]RegistrationInfo, string, error) {
	return checkedPage(ctx, s, byAdmin(by), pg, "list registration tokens", listRegistrationsSQL, nil, scanRegistration,
		func(r RegistrationInfo) string { return r.ID })
}

// RevokeRegistrationTokenAs ends registration token id, on behalf of by,
// who must be a global admin: it registers nothing from now on. Revoking
// one expired or revoked changes nothing; one already used is EConflict,
// naming its runner.
func (s *Store) RevokeRegistrationTokenAs(ctx context.Context, by User, id string) (RegistrationInfo, error) {
	return inTxValue(ctx, s, func(tx pgx.Tx) (RegistrationInfo, error) {
		if err := byAdmin(by).run(ctx, tx); err != nil {
			return RegistrationInfo{}, err
		}
		if _, err := tx.Exec(ctx, revokeRegistrationSQL, id); err != nil {
			return RegistrationInfo{}, fmt.Errorf("revoke registration token: %w", err)
		}
		rows, err := tx.Query(ctx, registrationSQL, id)
		if err != nil {
			return RegistrationInfo{}, fmt.Errorf("revoke registration token: %w", err)
		}
		info, err := pgx.CollectExactlyOneRow(rows, scanRegistration)
		if errors.Is(err, pgx.ErrNoRows) {
			return RegistrationInfo{}, domain.Errorf(domain.ENotFound, "registration token %s not found", id)
		}
		if err != nil {
			return RegistrationInfo{}, fmt.Errorf("revoke registration token: %w", err)
		}
		if info.UsedAt != nil {
			return RegistrationInfo{}, domain.Errorf(domain.EConflict,
				"registration token %s registered runner %s: revoke the runner (forgeci runner revoke %s)", id, info.UsedByRunner, info.UsedByRunner)
		}
		return info, nil
	})
}

func scanRegistration(row pgx.CollectableRow) (RegistrationInfo, error) {
	var r RegistrationInfo
	err := row.Scan(&r.ID, &r.Description, &r.CreatedAt, &r.ExpiresAt, &r.UsedAt, &r.UsedByRunner, &r.ProjectNames,
		&r.Untrusted, &r.UntrustedOnly, &r.CreatedBy, &r.Expired)
	return r, err
}
