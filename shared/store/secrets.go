package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/mask"
	"github.com/forgeci/forgeci/shared/secretbox"
)

// Project secrets are sealed (AES-256-GCM) under the project's data key,
// which is stored only wrapped by the master key (KMS in AWS, a key file
// in the dev stack). No API returns a value; a claim carries only the
// secrets its job names, and only for a trusted run.

// sealSecretSQL stores sealed secret $2 of project $1 (of its environment
// $4, ” for the project's own), replacing its value (a legacy plain value
// too).
const sealSecretSQL = `
INSERT INTO project_secrets (project_id, name, sealed, environment) VALUES ($1, $2, $3, $4)
ON CONFLICT (project_id, environment, name) DO UPDATE SET sealed = $3, value = NULL, updated_at = now()`

// projectKeySQL is project $1's wrapped data key.
const projectKeySQL = `SELECT wrapped_key FROM project_keys WHERE project_id = $1`

// insertProjectKeySQL stores project $1's new data key, unless a
// concurrent first use stored one first: either way it returns the key
// that is stored.
const insertProjectKeySQL = `
INSERT INTO project_keys (project_id, wrapped_key, master_key) VALUES ($1, $2, $3)
ON CONFLICT (project_id) DO UPDATE SET project_id = EXCLUDED.project_id
RETURNING wrapped_key`

// listSecretsSQL is a page of project $1's secret names, after $2, at most $3.
const listSecretsSQL = `
SELECT name, updated_at FROM project_secrets WHERE project_id = $1 AND environment = '' AND name > $2
ORDER BY name LIMIT $3`

// deleteSecretSQL deletes secret $2 of project $1's environment $3.
const deleteSecretSQL = `DELETE FROM project_secrets WHERE project_id = $1 AND name = $2 AND environment = $3`

// environmentExistsSQL locks environment $2 of project $1, so that a
// secret is not added to one being deleted.
const environmentExistsSQL = `SELECT 1 FROM environments WHERE project_id = $1 AND name = $2 FOR SHARE`

// legacySecretsSQL locks the secrets still stored in plain text.
const legacySecretsSQL = `SELECT project_id, name, value FROM project_secrets WHERE value IS NOT NULL FOR UPDATE`

// LegacySecretsSQL is true while some secret is stored in plain text
// (SealLegacySecrets has work): a deploy's check of an installation
// migrated and sealed asks it with goose's table, in one statement.
const LegacySecretsSQL = `EXISTS (SELECT 1 FROM project_secrets WHERE value IS NOT NULL)`

// MinSecretBytes is the shortest secret value accepted: shorter ones
// cannot be told apart from ordinary log text to mask them.
const MinSecretBytes = mask.MinLen

// MaxSecretBytes is the longest secret value accepted.
const MaxSecretBytes = 65536

var secretNameRE = domain.LazyRegexp(`^[A-Z_][A-Z0-9_]{0,99}$`)

// ErrNoKeyring means no master key is configured, so secrets cannot be
// sealed or opened.
var ErrNoKeyring = domain.Errorf(domain.EUnavailable,
	"project secrets are not configured on this server (no master key: FORGECI_KMS_KEY_ID or FORGECI_SECRETS_KEY_FILE)")

// SetKeyring gives the store the master key it seals and opens secrets
// with; data keys it unwraps are kept for ten minutes.
func (s *Store) SetKeyring(k secretbox.Keyring) {
	s.keyring = k
	s.dataKeys = secretbox.NewCache(k, 10*time.Minute)
}

// SecretInfo is what anyone is told about a secret: not its value.
type SecretInfo struct {
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updated_at"`
}

// secretAAD binds a sealed value to its project, environment and name, so
// that no row's value can be moved to another name or scope.
func secretAAD(projectID, env, name string) []byte {
	if env == "" {
		return []byte("forgeci-secret\x00" + projectID + "\x00" + name)
	}
	return []byte("forgeci-env-secret\x00" + projectID + "\x00" + env + "\x00" + name)
}

// SetSecret seals and stores a project secret; u must be an admin of the
// project.
func (s *Store) SetSecret(ctx context.Context, u User, projectID, name, value string) error {
	return s.SetScopedSecret(ctx, u, projectID, "", name, value)
}

// SetScopedSecret seals and stores a secret of a project's environment
// env ("" for the project's own), which must exist; u must be an admin
// of the project. Only jobs that deploy to env get an environment's
// secret, in place of a project secret of the same name.
func (s *Store) SetScopedSecret(ctx context.Context, u User, projectID, env, name, value string) error {
	if !secretNameRE().MatchString(name) {
		return domain.Errorf(domain.EInvalid, "secret names are upper-case letters, digits and _, not starting with a digit: %q", name)
	}
	if len(value) < MinSecretBytes {
		return domain.Errorf(domain.EInvalid, "secret value too short: %d bytes, at least %d are needed, because a value that short cannot be masked in logs",
			len(value), MinSecretBytes)
	}
	if len(value) > MaxSecretBytes {
		return domain.Errorf(domain.EInvalid, "secret value too long: %d bytes, at most %d", len(value), MaxSecretBytes)
	}
	if s.keyring == nil {
		return ErrNoKeyring
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, projectID, RankAdmin, "project "+projectID); err != nil {
			return err
		}
		if env != "" {
			var one int
			if err := tx.QueryRow(ctx, environmentExistsSQL, projectID, env).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
				return domain.Errorf(domain.ENotFound, "environment %s not found: make it first", env)
			} else if err != nil {
				return fmt.Errorf("read environment: %w", err)
			}
		}
		return s.sealSecret(ctx, tx, projectID, env, name, value)
	})
}

func (s *Store) sealSecret(ctx context.Context, tx pgx.Tx, projectID, env, name, value string) error {
	key, err := s.projectKey(ctx, tx, projectID)
	if err != nil {
		return err
	}
	sealed, err := secretbox.Seal(key, []byte(value), secretAAD(projectID, env, name))
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sealSecretSQL, projectID, name, sealed, env)
	if err != nil {
		return fmt.Errorf("store secret: %w", err)
	}
	return nil
}

// projectKey returns the project's data key, making it on first use. Two
// first uses at once both make one; the second insert loses and uses the
// first's.
func (s *Store) projectKey(ctx context.Context, tx pgx.Tx, projectID string) ([]byte, error) {
	var wrapped []byte
	err := tx.QueryRow(ctx, projectKeySQL, projectID).Scan(&wrapped)
	if errors.Is(err, pgx.ErrNoRows) {
		plain, w, err := s.keyring.GenerateDataKey(ctx)
		if err != nil {
			return nil, fmt.Errorf("make project data key: %w", err)
		}
		if err := tx.QueryRow(ctx, insertProjectKeySQL, projectID, w, s.keyring.ID()).Scan(&wrapped); err != nil {
			return nil, fmt.Errorf("store project data key: %w", err)
		}
		if string(wrapped) == string(w) {
			return plain, nil
		}
	} else if err != nil {
		return nil, fmt.Errorf("project data key: %w", err)
	}
	return s.dataKeys.Decrypt(ctx, wrapped)
}

// ListSecrets lists a page of a project's secret names; u must be an admin
// of it.
func (s *Store) ListSecrets(ctx context.Context, u User, projectID string, pg Page) ([]SecretInfo, string, error) {
	return adminPage(ctx, s, u, projectID, pg, "secrets", listSecretsSQL,
		func(row pgx.CollectableRow) (SecretInfo, error) {
			var si SecretInfo
			return si, row.Scan(&si.Name, &si.UpdatedAt)
		},
		func(si SecretInfo) string { return si.Name })
}

// DeleteSecret removes a secret of a project's environment env ("" for
// the project's own); u must be an admin of the project.
func (s *Store) DeleteSecret(ctx context.Context, u User, projectID, env, name string) error {
	return s.adminDelete(ctx, u, projectID, "delete secret", deleteSecretSQL,
		domain.Errorf(domain.ENotFound, "secret %s not found", name), name, env)
}

// SealLegacySecrets seals the plain-text secrets an installation had before
// secrets were sealed (migration 00005). It returns how many it sealed.
func (s *Store) SealLegacySecrets(ctx context.Context) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, legacySecretsSQL)
		if err != nil {
			return err
		}
		type legacy struct{ project, name, value string }
		list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (legacy, error) {
			var l legacy
			return l, row.Scan(&l.project, &l.name, &l.value)
		})
		if err != nil || len(list) == 0 {
			return err
		}
		if s.keyring == nil {
			return fmt.Errorf("%d project secrets are stored in plain text and no master key is configured to seal them: set FORGECI_KMS_KEY_ID or FORGECI_SECRETS_KEY_FILE", len(list))
		}
		for _, l := range list {
			if err := s.sealSecret(ctx, tx, l.project, "", l.name, l.value); err != nil {
				return err
			}
		}
		n = len(list)
		return nil
	})
	return n, err
}

// sealedSecret is a secret as a claim reads it: sealed, or (before
// SealLegacySecrets ran) plain.
type sealedSecret struct {
	Name        string
	Environment string // '' for the project's own
	Sealed      []byte
	Value       *string
}

// openSecrets opens the secrets a claim fetched, with the project's key:
// an environment's secret replaces the project's of the same name,
// whatever order the rows came in.
func (s *Store) openSecrets(ctx context.Context, projectID string, wrapped []byte, list []sealedSecret) (map[string]string, error) {
	slices.SortStableFunc(list, func(a, b sealedSecret) int { return strings.Compare(a.Environment, b.Environment) })
	values, err := s.openEach(ctx, projectID, wrapped, list)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(list))
	for i, sec := range list {
		out[sec.Name] = values[i]
	}
	return out, nil
}

// openEach opens every secret of list, in its order.
func (s *Store) openEach(ctx context.Context, projectID string, wrapped []byte, list []sealedSecret) ([]string, error) {
	out := make([]string, 0, len(list))
	var key []byte
	for _, sec := range list {
		if sec.Value != nil {
			out = append(out, *sec.Value)
			continue
		}
		if key == nil {
			if s.dataKeys == nil {
				return nil, ErrNoKeyring
			}
			var err error
			if key, err = s.dataKeys.Decrypt(ctx, wrapped); err != nil {
				return nil, fmt.Errorf("unwrap data key of project %s: %w", projectID, err)
			}
		}
		v, err := secretbox.Open(key, sec.Sealed, secretAAD(projectID, sec.Environment, sec.Name))
		if err != nil {
			return nil, fmt.Errorf("open secret %s of project %s: %w", sec.Name, projectID, err)
		}
		out = append(out, string(v))
	}
	return out, nil
}
