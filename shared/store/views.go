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

// What people look at: projects, run lists, attempts; and what admins
// manage: users and their tokens. The dashboard and CLI share these.

// RunFilter selects runs, newest first.
type RunFilter struct {
	Project string // a name or ID; "" for every project the user may read
	Page
}

// ListRuns returns a page of the runs u may read, newest first. A project
// named in the filter that u cannot read is ENotFound, as if it did not
// exist. The cursor is the last run's ID (the "before" of the old API).
func (s *Store) ListRuns(ctx context.Context, u User, f RunFilter) ([]Run, string, error) {
	limit, err := f.limit()
	if err != nil {
		return nil, "", err
	}
	if f.Project != "" {
		if _, err := s.GetProject(ctx, u, f.Project); err != nil {
			return nil, "", err
		}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+runColumns+`
		FROM runs r JOIN projects p ON p.id = r.project_id
		WHERE ($1 = '' OR p.name = $1 OR p.id = $1)
		  AND ($2 = '' OR (r.created_at, r.id) < (SELECT b.created_at, b.id FROM runs b
		                                           WHERE b.id = $2 AND `+canRead("$4", "b.project_id")+`))
		  AND `+canRead("$4", "r.project_id")+`
		ORDER BY r.created_at DESC, r.id DESC LIMIT $3`, f.Project, f.Cursor, limit+1, u.ID)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
	if err != nil {
		return nil, "", err
	}
	if len(runs) <= limit {
		return runs, "", nil
	}
	return runs[:limit], runs[limit-1].ID, nil
}

// Attempt is one lease of a job: ended ones from job_attempts, the current
// one from the job row.
type Attempt struct {
	Generation int        `json:"generation"`
	RunnerID   string     `json:"runner_id"`
	RunnerName string     `json:"runner_name"`
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	Outcome    string     `json:"outcome"` // RUNNING for the current lease
	Reason     string     `json:"reason,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	LogSize    int64      `json:"log_size"`
}

// JobDetail is a job with its attempts.
type JobDetail struct {
	JobInfo
	RunID    string    `json:"run_id"`
	Labels   []string  `json:"labels"`
	Attempts []Attempt `json:"attempts"`
}

// GetJob returns a job of a run u may read, and its attempts, oldest first.
func (s *Store) GetJob(ctx context.Context, u User, runID, jobID string) (JobDetail, error) {
	var d JobDetail
	err := s.pool.QueryRow(ctx, `
		SELECT j.id, j.run_id, j.name, j.state, j.needs, j.labels, j.generation, coalesce(j.runner_id, ''),
		       coalesce(j.reason, ''), j.exit_code, j.log_size, j.started_at, j.finished_at
		FROM jobs j JOIN runs r ON r.id = j.run_id
		WHERE j.id = $1 AND j.run_id = $2 AND `+canRead("$3", "r.project_id"), jobID, runID, u.ID).Scan(&d.ID, &d.RunID, &d.Name, &d.State, &d.Needs,
		&d.Labels, &d.Generation, &d.RunnerID, &d.Reason, &d.ExitCode, &d.LogSize, &d.StartedAt, &d.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, domain.Errorf(domain.ENotFound, "job %s of run %s not found", jobID, runID)
	}
	if err != nil {
		return d, fmt.Errorf("get job: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT a.generation, a.runner_id, coalesce(r.name, ''), a.started_at, a.ended_at, a.outcome,
		       coalesce(a.reason, ''), a.exit_code, a.log_size
		FROM job_attempts a LEFT JOIN runners r ON r.id = a.runner_id
		WHERE a.job_id = $1
		UNION ALL
		SELECT j.generation, j.runner_id, coalesce(r.name, ''), j.started_at, NULL, 'RUNNING', '', NULL, j.log_size
		FROM jobs j LEFT JOIN runners r ON r.id = j.runner_id
		WHERE j.id = $1 AND j.state = 'RUNNING'
		ORDER BY 1`, jobID)
	if err != nil {
		return d, fmt.Errorf("job attempts: %w", err)
	}
	d.Attempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := row.Scan(&a.Generation, &a.RunnerID, &a.RunnerName, &a.StartedAt, &a.EndedAt, &a.Outcome,
			&a.Reason, &a.ExitCode, &a.LogSize)
		return a, err
	})
	return d, err
}

// IsTerminalRun reports whether a run state is final.
func IsTerminalRun(state string) bool {
	switch state {
	case "PASSED", "FAILED", "CANCELED", "ABORTED":
		return true
	}
	return false
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
	rows, err := s.pool.Query(ctx, `
		SELECT u.id, u.name, u.role, u.created_at, u.disabled_at,
		       (SELECT count(*) FROM user_tokens t WHERE t.user_id = u.id AND t.revoked_at IS NULL)
		FROM users u WHERE u.name > $1 ORDER BY u.name LIMIT $2`, after[0], limit+1)
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

// CreateUserToken gives a user another API token, returned once.
func (s *Store) CreateUserToken(ctx context.Context, userID, description string) (id, token string, err error) {
	description = strings.TrimSpace(description)
	if len(description) > 200 {
		return "", "", domain.Errorf(domain.EInvalid, "description is at most 200 characters")
	}
	id, token = uuid.Must(uuid.NewV7()).String(), newSecret(userTokenPrefix)
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO user_tokens (id, user_id, token_hash, description)
		SELECT $1, id, $3, $4 FROM users WHERE id = $2 AND disabled_at IS NULL`, id, userID, hashSecret(token), description)
	if err != nil {
		return "", "", fmt.Errorf("create token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return "", "", domain.Errorf(domain.ENotFound, "no active user %s", userID)
	}
	return id, token, nil
}

// DisableUser disables a user and revokes every token of theirs.
func (s *Store) DisableUser(ctx context.Context, userID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE users SET disabled_at = coalesce(disabled_at, now()) WHERE id = $1`, userID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return domain.Errorf(domain.ENotFound, "user %s not found", userID)
		}
		_, err = tx.Exec(ctx, `UPDATE user_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE user_id = $1`, userID)
		return err
	})
}
