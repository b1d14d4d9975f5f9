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

// User roles, weakest first.
const (
	RoleRead  = "read"
	RoleWrite = "write"
	RoleAdmin = "admin"
)

var roleRank = map[string]int{RoleRead: 1, RoleWrite: 2, RoleAdmin: 3}

// User is an authenticated person.
type User struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role"`
}

// Can reports whether the user's role is at least role.
func (u User) Can(role string) bool { return roleRank[u.Role] >= roleRank[role] }

// CreateUser makes a user with a first API token, returned once.
func (s *Store) CreateUser(ctx context.Context, name, role string) (User, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 100 {
		return User{}, "", domain.Errorf(domain.EInvalid, "user name must be 1 to 100 characters")
	}
	if roleRank[role] == 0 {
		return User{}, "", domain.Errorf(domain.EInvalid, "role must be admin, write or read")
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
