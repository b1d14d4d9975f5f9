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

// Projects are the unit of tenancy: every run, blob, cache, secret and
// repository belongs to one, and people act in a project through their
// membership. Projects are only ever created explicitly.

// insertProjectSQL makes a project; its name is unique.
const insertProjectSQL = `INSERT INTO projects (id, name, default_branch) VALUES ($1, $2, $3) RETURNING created_at`

// projectColumns and projectFrom are what scanProject reads, for user $1:
// the project, its last run, and the user's rank and secrets permission
// in it (fragments of the statements below, joined at compile time).
const projectColumns = `p.id, p.name, p.default_branch, p.next_run_number, coalesce(l.state, ''), l.created_at, p.created_at,
	project_rank($1, p.id), u.role = 'admin' OR coalesce(m.secrets, false)`

const projectFrom = `projects p
	JOIN users u ON u.id = $1
	LEFT JOIN project_members m ON m.project_id = p.id AND m.user_id = $1
	LEFT JOIN LATERAL (SELECT state, created_at FROM runs r WHERE r.project_id = p.id
	                   ORDER BY r.number DESC LIMIT 1) l ON true`

// listProjectsSQL is a page of the projects user $1 may read, by name,
// after $2, at most $3.
const listProjectsSQL = `SELECT ` + projectColumns + ` FROM ` + projectFrom + `
WHERE project_rank($1, p.id) >= 1 AND p.name > $2
ORDER BY p.name LIMIT $3`

// getProjectSQL is project $2 (an ID, or else a name) if user $1 may read it.
const getProjectSQL = `SELECT ` + projectColumns + ` FROM ` + projectFrom + `
WHERE (p.id = $2 OR p.name = $2) AND project_rank($1, p.id) >= 1
ORDER BY p.id = $2 DESC LIMIT 1`

const projectIDSQL = `SELECT id FROM projects WHERE name = $1`

// membersSQL is a page of project $1's members by name, after $2, at most $3.
const membersSQL = `
SELECT m.user_id, u.name, m.role, m.secrets, m.created_at
FROM project_members m JOIN users u ON u.id = m.user_id
WHERE m.project_id = $1 AND u.name > $2 ORDER BY u.name LIMIT $3`

// activeUserSQL finds an active user by ID, or else by name.
const activeUserSQL = `
SELECT id, name FROM users WHERE (id = $1 OR name = $1) AND disabled_at IS NULL
ORDER BY id = $1 DESC LIMIT 1`

const setMemberSQL = `
INSERT INTO project_members (project_id, user_id, role, secrets) VALUES ($1, $2, $3, $4)
ON CONFLICT (project_id, user_id) DO UPDATE SET role = $3, secrets = $4
RETURNING created_at`

const removeMemberSQL = `DELETE FROM project_members WHERE project_id = $1 AND user_id = $2`

// lockMembersSQL makes changes to project $1's members take turns: an
// advisory lock, taken first, as no other write takes it (the project's
// row, which environment and hook changes take after authorizing, would
// deadlock with a removal that waits for their hold on a membership).
const lockMembersSQL = `SELECT pg_advisory_xact_lock(7421, hashtext($1))`

// lastAdminSQL asks whether user $2 is project $1's only admin among its
// enabled members.
const lastAdminSQL = `
SELECT EXISTS (SELECT 1 FROM project_members WHERE project_id = $1 AND user_id = $2 AND role = 'admin')
   AND NOT EXISTS (SELECT 1 FROM project_members m JOIN users u ON u.id = m.user_id
                   WHERE m.project_id = $1 AND m.user_id <> $2 AND m.role = 'admin' AND u.disabled_at IS NULL)`

// lockProjectSQL makes changes to project $1's lists take turns.
const lockProjectSQL = `SELECT 1 FROM projects WHERE id = $1 FOR NO KEY UPDATE`

// setSettingsSQL changes the settings given (not NULL) of project $1.
const setSettingsSQL = `
UPDATE projects SET retention_days = coalesce($2, retention_days),
       cache_quota_bytes = coalesce($3, cache_quota_bytes),
       storage_quota_bytes = coalesce($4, storage_quota_bytes),
       badges_public = coalesce($5, badges_public)
WHERE id = $1`

// Project is a project as a user sees it.
type Project struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	DefaultBranch string     `json:"default_branch"`
	Runs          int64      `json:"runs"`
	LastState     string     `json:"last_state,omitempty"`
	LastRunAt     *time.Time `json:"last_run_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	// The caller's access: their role here and whether their runs are
	// trusted (global admins: admin and true everywhere).
	Role    string `json:"role"`
	Secrets bool   `json:"secrets"`
}

var (
	projectNameRE = domain.LazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
	branchRE      = domain.LazyRegexp(`^[A-Za-z0-9._][A-Za-z0-9._/-]{0,199}$`)
)

// ValidateProjectName checks a project name.
func ValidateProjectName(name string) error {
	if !projectNameRE().MatchString(name) || strings.Contains(name, "//") || strings.HasSuffix(name, "/") {
		return domain.Errorf(domain.EInvalid, "project name must be 1 to 200 letters, digits or . _ / -, starting with a letter or digit, such as acme/app")
	}
	return nil
}

func validateBranch(b string) error {
	if !branchRE().MatchString(b) || strings.Contains(b, "..") || strings.HasSuffix(b, "/") || strings.HasPrefix(b, "refs/") {
		return domain.Errorf(domain.EInvalid, "default_branch must be a branch name such as main (not a full ref)")
	}
	return nil
}

// CreateProject makes a project. It is the operator's call (the dev stack,
// `forgeci repo add`, tests); people go through CreateProjectAs.
func (s *Store) CreateProject(ctx context.Context, name, defaultBranch string) (Project, error) {
	var p Project
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		p, err = createProjectTx(ctx, tx, name, defaultBranch)
		return err
	})
	return p, err
}

// CreateProjectAs makes a project on behalf of u, who must be a global admin.
func (s *Store) CreateProjectAs(ctx context.Context, u User, name, defaultBranch string) (Project, error) {
	var p Project
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := requireGlobalAdmin(ctx, tx, u); err != nil {
			return err
		}
		var err error
		p, err = createProjectTx(ctx, tx, name, defaultBranch)
		return err
	})
	return p, err
}

func createProjectTx(ctx context.Context, tx pgx.Tx, name, defaultBranch string) (Project, error) {
	if defaultBranch == "" {
		defaultBranch = "main"
	}
	if err := ValidateProjectName(name); err != nil {
		return Project{}, err
	}
	if err := validateBranch(defaultBranch); err != nil {
		return Project{}, err
	}
	p := Project{ID: uuid.Must(uuid.NewV7()).String(), Name: name, DefaultBranch: defaultBranch,
		Role: RoleAdmin, Secrets: true}
	err := tx.QueryRow(ctx, insertProjectSQL, p.ID, name, defaultBranch).Scan(&p.CreatedAt)
	if isUniqueViolation(err) {
		return Project{}, domain.Errorf(domain.EConflict, "a project named %q exists", name)
	}
	if err != nil {
		return Project{}, fmt.Errorf("create project: %w", err)
	}
	return p, nil
}

func scanProject(row pgx.Row) (Project, error) {
	var p Project
	var rank int
	err := row.Scan(&p.ID, &p.Name, &p.DefaultBranch, &p.Runs, &p.LastState, &p.LastRunAt, &p.CreatedAt, &rank, &p.Secrets)
	p.Role = roleOfRank[rank]
	return p, err
}

// ListProjects returns a page of the projects u may read, by name.
func (s *Store) ListProjects(ctx context.Context, u User, pg Page) ([]Project, string, error) {
	limit, after, err := pg.parse(1)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, listProjectsSQL, u.ID, after[0], limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list projects: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Project, error) { return scanProject(row) })
	if err != nil {
		return nil, "", err
	}
	ps, next := trim(ps, limit, func(p Project) []string { return []string{p.Name} })
	return ps, next, nil
}

// GetProject returns a project u may read, by ID or by name.
func (s *Store) GetProject(ctx context.Context, u User, idOrName string) (Project, error) {
	p, err := scanProject(s.pool.QueryRow(ctx, getProjectSQL, u.ID, idOrName))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, domain.Errorf(domain.ENotFound, "project %s not found", idOrName)
	}
	return p, err
}

// ProjectID returns the ID of the project with this name (operator tools).
func (s *Store) ProjectID(ctx context.Context, name string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, projectIDSQL, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", domain.Errorf(domain.ENotFound, "project %q does not exist: create it first (forgeci project create %s)", name, name)
	}
	return id, err
}

// Member is a user's membership of a project.
type Member struct {
	UserID    string    `json:"user_id"`
	UserName  string    `json:"user"`
	Role      string    `json:"role"`
	Secrets   bool      `json:"secrets"`
	CreatedAt time.Time `json:"created_at"`
}

// Members lists a page of a project's members by name; u must be an admin
// of the project.
func (s *Store) Members(ctx context.Context, u User, projectID string, pg Page) ([]Member, string, error) {
	return adminPage(ctx, s, u, projectID, pg, "members", membersSQL,
		func(row pgx.CollectableRow) (Member, error) {
			var m Member
			err := row.Scan(&m.UserID, &m.UserName, &m.Role, &m.Secrets, &m.CreatedAt)
			return m, err
		},
		func(m Member) string { return m.UserName })
}

// SetMember adds a user (by name or ID) to a project or changes their role
// and secrets permission; u must be an admin of the project, and only one
// who holds the secrets permission may grant it.
func (s *Store) SetMember(ctx context.Context, u User, projectID, user, role string, secrets bool) (Member, error) {
	if rankOfRole[role] == RankNone {
		return Member{}, domain.Errorf(domain.EInvalid, "role must be read, write or admin")
	}
	m := Member{Role: role, Secrets: secrets}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockMembersSQL, projectID); err != nil {
			return fmt.Errorf("lock members: %w", err)
		}
		a, err := authorize(ctx, tx, u, projectID, RankAdmin, "project "+projectID)
		if err != nil {
			return err
		}
		if secrets && !a.Secrets {
			return domain.Errorf(domain.EForbidden, "only a member who holds the secrets permission may grant it")
		}
		err = tx.QueryRow(ctx, activeUserSQL, user).Scan(&m.UserID, &m.UserName)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.EInvalid, "no active user %q", user)
		}
		if err != nil {
			return err
		}
		if role != RoleAdmin {
			if err := keepAnAdmin(ctx, tx, u, projectID, m.UserID, "taking the admin role from"); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, setMemberSQL, projectID, m.UserID, role, secrets).Scan(&m.CreatedAt)
	})
	return m, err
}

// RemoveMember removes a user from a project; u must be an admin of it.
func (s *Store) RemoveMember(ctx context.Context, u User, projectID, userID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockMembersSQL, projectID); err != nil {
			return fmt.Errorf("lock members: %w", err)
		}
		if _, err := authorize(ctx, tx, u, projectID, RankAdmin, "project "+projectID); err != nil {
			return err
		}
		if err := keepAnAdmin(ctx, tx, u, projectID, userID, "removing"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, removeMemberSQL, projectID, userID)
		if err != nil {
			return fmt.Errorf("remove member: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return domain.Errorf(domain.ENotFound, "user %s is not a member of this project", userID)
		}
		return nil
	})
}

// keepAnAdmin refuses, unless u is a global admin, a change (doing, to
// userID) that would leave the project without an admin among its
// members: no one but a global admin could then manage its members,
// secrets and environments. The transaction took lockMembersSQL first, so
// two admins removing each other take turns and the second is refused.
func keepAnAdmin(ctx context.Context, tx pgx.Tx, u User, projectID, userID, doing string) error {
	var global, last bool
	if err := tx.QueryRow(ctx, globalAdminSQL, u.ID).Scan(&global); err != nil {
		return fmt.Errorf("authorize: %w", err)
	}
	if err := tx.QueryRow(ctx, lastAdminSQL, projectID, userID).Scan(&last); err != nil {
		return fmt.Errorf("last admin: %w", err)
	}
	if last && !global {
		return domain.Errorf(domain.EConflict, "%s the project's last admin would leave no one but a global admin to manage it: "+
			"make another member admin first", doing)
	}
	return nil
}

// adminDelete deletes one of a project's rows, by its key, as u, who must
// be an admin of the project: query takes the project and the key's parts,
// and a key that matches no row is notFound.
func (s *Store) adminDelete(ctx context.Context, u User, projectID, what, query string, notFound error, keys ...any) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, projectID, RankAdmin, "project "+projectID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, query, append([]any{projectID}, keys...)...)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if tag.RowsAffected() == 0 {
			return notFound
		}
		return nil
	})
}

// Settings are what a project keeps. A nil field is left as it is.
type Settings struct {
	RetentionDays     *int   `json:"retention_days"`
	CacheQuotaBytes   *int64 `json:"cache_quota_bytes"`
	StorageQuotaBytes *int64 `json:"storage_quota_bytes"`
	// BadgesPublic serves the project's status badges without login.
	BadgesPublic *bool `json:"badges_public"`
}

// SetSettings changes a project's retention and quotas. Its admins set the
// retention and the cache quota; the storage quota, which is what the
// installation pays for, only a global admin.
func (s *Store) SetSettings(ctx context.Context, u User, projectID string, st Settings) error {
	switch {
	case st.RetentionDays != nil && (*st.RetentionDays < 1 || *st.RetentionDays > 3650):
		return domain.Errorf(domain.EInvalid, "field retention_days must be from 1 to 3650")
	case st.CacheQuotaBytes != nil && (*st.CacheQuotaBytes < 0 || *st.CacheQuotaBytes > 1<<40):
		return domain.Errorf(domain.EInvalid, "field cache_quota_bytes must be from 0 to %d", int64(1)<<40)
	case st.StorageQuotaBytes != nil && (*st.StorageQuotaBytes < 0 || *st.StorageQuotaBytes > 100<<40):
		return domain.Errorf(domain.EInvalid, "field storage_quota_bytes must be from 0 to %d", int64(100)<<40)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, projectID, RankAdmin, "project "+projectID); err != nil {
			return err
		}
		if st.StorageQuotaBytes != nil {
			if err := requireGlobalAdmin(ctx, tx, u); err != nil {
				return domain.Errorf(domain.EForbidden, "only global admins set a project's storage quota")
			}
		}
		_, err := tx.Exec(ctx, setSettingsSQL, projectID, st.RetentionDays, st.CacheQuotaBytes, st.StorageQuotaBytes, st.BadgesPublic)
		return err
	})
}
