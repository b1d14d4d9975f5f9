package store

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

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
}

// IsAdmin reports whether the user is a global admin.
func (u User) IsAdmin() bool { return u.Role == RoleAdmin }

// CreateUser makes a user with a first API token, returned once.
func (s *Store) CreateUser(ctx context.Context, name, role string) (User, string, error) {
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
		if _, err := tx.Exec(ctx, `INSERT INTO users (id, name, role) VALUES ($1, $2, $3)`, u.ID, u.Name, u.Role); err != nil {
			if isUniqueViolation(err) {
				return domain.Errorf(domain.EConflict, "a user named %q exists", name)
			}
			return fmt.Errorf("insert user: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO user_tokens (id, user_id, token_hash, description) VALUES ($1, $2, $3, 'first token')`,
			uuid.Must(uuid.NewV7()).String(), u.ID, hashSecret(token))
		return err
	})
	if err != nil {
		return User{}, "", err
	}
	return u, token, nil
}

// AuthenticateUser maps an API token to its user.
func (s *Store) AuthenticateUser(ctx context.Context, token string) (User, error) {
	unauthorized := domain.Errorf(domain.EUnauthorized, "API token is missing, unknown or revoked")
	if !strings.HasPrefix(token, userTokenPrefix) || len(token) > 200 {
		return User{}, unauthorized
	}
	want := hashSecret(token)
	var u User
	var got []byte
	err := s.pool.QueryRow(ctx, `
		SELECT u.id, u.name, u.role, t.token_hash FROM user_tokens t JOIN users u ON u.id = t.user_id
		WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND u.disabled_at IS NULL`, want).Scan(&u.ID, &u.Name, &u.Role, &got)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && subtle.ConstantTimeCompare(got, want) != 1) {
		return User{}, unauthorized
	}
	if err != nil {
		return User{}, fmt.Errorf("authenticate user: %w", err)
	}
	return u, nil
}
