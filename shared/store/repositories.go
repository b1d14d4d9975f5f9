package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// GitHub repositories registered with ForgeCI, each for one project; their
// webhook deliveries are in deliveries.go, their check runs in checks.go.

// addRepositorySQL registers GitHub repository $1, or updates it.
const addRepositorySQL = `
INSERT INTO scm_repositories (github_id, full_name, installation_id, webhook_secret, project_id)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (github_id) DO UPDATE SET full_name = $2, installation_id = $3, webhook_secret = $4, project_id = $5`

const repositorySQL = `
SELECT r.github_id, r.full_name, r.installation_id, r.webhook_secret, r.project_id, p.name, r.created_at
FROM scm_repositories r JOIN projects p ON p.id = r.project_id WHERE r.github_id = $1`

// Repository is a GitHub repository registered with ForgeCI.
type Repository struct {
	GitHubID       int64     `json:"github_id"`
	FullName       string    `json:"full_name"`
	InstallationID int64     `json:"installation_id"`
	ProjectID      string    `json:"project_id"`
	Project        string    `json:"project"` // the project's name
	WebhookSecret  string    `json:"-"`
	CreatedAt      time.Time `json:"created_at"`
}

var fullNameRE = domain.LazyRegexp(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)

// AddRepository registers (or updates) a repository for an existing
// project, named by r.Project.
func (s *Store) AddRepository(ctx context.Context, r Repository) error {
	switch {
	case r.GitHubID <= 0:
		return domain.Errorf(domain.EInvalid, "the GitHub repository ID must be a positive integer")
	case !fullNameRE().MatchString(r.FullName):
		return domain.Errorf(domain.EInvalid, "repository must be owner/name, got %q", r.FullName)
	case r.InstallationID <= 0:
		return domain.Errorf(domain.EInvalid, "the GitHub App installation ID must be a positive integer")
	case len(r.WebhookSecret) < 16:
		return domain.Errorf(domain.EInvalid, "the webhook secret must be at least 16 characters")
	case r.Project == "":
		return domain.Errorf(domain.EInvalid, "a project name is required")
	}
	projectID, err := s.ProjectID(ctx, r.Project)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, addRepositorySQL, r.GitHubID, r.FullName, r.InstallationID, r.WebhookSecret, projectID)
	if isUniqueViolation(err) {
		return domain.Errorf(domain.EConflict, "another repository is registered as %s", r.FullName)
	}
	return err
}

// Repository returns a registered repository by its GitHub ID.
func (s *Store) Repository(ctx context.Context, githubID int64) (Repository, error) {
	var r Repository
	err := s.pool.QueryRow(ctx, repositorySQL, githubID).Scan(&r.GitHubID, &r.FullName, &r.InstallationID, &r.WebhookSecret, &r.ProjectID, &r.Project, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, domain.Errorf(domain.ENotFound, "repository %d is not registered", githubID)
	}
	return r, err
}

// freeRepositoryNameSQL marks the name $2 stale on any other repository
// than $1 that still holds it: GitHub gave it to $1 since (that one was
// renamed or transferred away, and learns its own name at its next
// delivery or check run push). The mark is a name the column's check
// takes and GitHub never gives (no owner starts with a dash), one per
// repository.
const freeRepositoryNameSQL = `
UPDATE scm_repositories SET full_name = '` + staleNamePrefix + `' || github_id || '/' || split_part(full_name, '/', 2)
WHERE full_name = $2 AND github_id <> $1`

const staleNamePrefix = "-stale-"

// StaleRepositoryName reports whether a registered repository's name is
// the stale mark freeRepositoryNameSQL gave it: its name must be asked
// of GitHub by its ID.
func StaleRepositoryName(fullName string) bool { return strings.HasPrefix(fullName, staleNamePrefix) }

const renameRepositorySQL = `UPDATE scm_repositories SET full_name = $2 WHERE github_id = $1`

// RenameRepository records the name GitHub now gives repository githubID
// (renamed, or transferred): every call to GitHub is made by the name,
// so it must be the repository's, never another's that took the old one.
func (s *Store) RenameRepository(ctx context.Context, githubID int64, fullName string) error {
	if !fullNameRE().MatchString(fullName) {
		return domain.Errorf(domain.EInvalid, "GitHub names repository %d %q, which is not owner/name", githubID, fullName)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, freeRepositoryNameSQL, githubID, fullName); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, renameRepositorySQL, githubID, fullName)
		return err
	})
}
