package store

import (
	"context"
	"encoding/json"
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

// Project is a project with its latest run.
type Project struct {
	Name      string     `json:"name"`
	Runs      int64      `json:"runs"`
	LastState string     `json:"last_state,omitempty"`
	LastRunAt *time.Time `json:"last_run_at,omitempty"`
}

// ListProjects returns the projects, most recently run first.
func (s *Store) ListProjects(ctx context.Context) ([]Project, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT p.name, p.next_run_number, coalesce(l.state, ''), l.created_at
		FROM projects p
		LEFT JOIN LATERAL (SELECT state, created_at FROM runs r WHERE r.project_id = p.id
		                   ORDER BY r.number DESC LIMIT 1) l ON true
		ORDER BY l.created_at DESC NULLS LAST, p.name`)
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Project, error) {
		var p Project
		err := row.Scan(&p.Name, &p.Runs, &p.LastState, &p.LastRunAt)
		return p, err
	})
}

// RunFilter selects runs, newest first.
type RunFilter struct {
	Project string // "" for all
	Limit   int    // 1-200, default 50
	Before  string // a run ID: only runs created before it (the next page)
}

// ListRuns returns runs, newest first.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 200 {
		return nil, domain.Errorf(domain.EInvalid, "limit must be at most 200")
	}
	rows, err := s.pool.Query(ctx, `
		SELECT r.id, p.name, r.number, r.state, r.trigger, coalesce(r.git_sha, ''), coalesce(r.git_ref, ''),
		       r.git_dirty, coalesce(r.source_digest, ''), coalesce(r.manifest_digest, ''), r.created_at,
		       r.started_at, r.finished_at
		FROM runs r JOIN projects p ON p.id = r.project_id
		WHERE ($1 = '' OR p.name = $1)
		  AND ($2 = '' OR (r.created_at, r.id) < (SELECT created_at, id FROM runs WHERE id = $2))
		ORDER BY r.created_at DESC, r.id DESC LIMIT $3`, f.Project, f.Before, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		var r Run
		err := row.Scan(&r.ID, &r.Project, &r.Number, &r.State, &r.Trigger, &r.GitSHA, &r.GitRef, &r.GitDirty,
			&r.SourceDigest, &r.ManifestDigest, &r.CreatedAt, &r.StartedAt, &r.FinishedAt)
		return r, err
	})
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

// GetJob returns a job of a run and its attempts, oldest first.
func (s *Store) GetJob(ctx context.Context, runID, jobID string) (JobDetail, error) {
	var d JobDetail
	err := s.pool.QueryRow(ctx, `
		SELECT id, run_id, name, state, needs, labels, generation, coalesce(runner_id, ''), coalesce(reason, ''),
		       exit_code, log_size, started_at, finished_at
		FROM jobs WHERE id = $1 AND run_id = $2`, jobID, runID).Scan(&d.ID, &d.RunID, &d.Name, &d.State, &d.Needs,
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

// Retry creates a new run from a finished run: all its jobs, or only jobID,
// on the same source snapshot. The old run is left as it was.
func (s *Store) Retry(ctx context.Context, runID, jobID, who string) (Run, error) {
	old, err := s.GetRun(ctx, runID)
	if err != nil {
		return Run{}, err
	}
	if !IsTerminalRun(old.State) {
		return Run{}, domain.Errorf(domain.EConflict, "run %s is %s; retry it once it has finished (or cancel it)", runID, old.State)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, name, needs, labels, spec, timeout_seconds, retry_lease_lost, retry_failed, state
		FROM jobs WHERE run_id = $1 AND ($2 = '' OR id = $2) ORDER BY created_at, id`, runID, jobID)
	if err != nil {
		return Run{}, err
	}
	type oldJob struct {
		NewJob
		ID, State string
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (oldJob, error) {
		var j oldJob
		var spec []byte
		if err := row.Scan(&j.ID, &j.Name, &j.Needs, &j.Labels, &spec, &j.TimeoutSeconds, &j.RetryLeaseLost, &j.RetryFailed, &j.State); err != nil {
			return j, err
		}
		var cj domain.ClaimedJob
		if err := json.Unmarshal(spec, &cj); err != nil {
			return j, fmt.Errorf("job %s spec: %w", j.Name, err)
		}
		j.Spec = cj.JobSpec
		return j, nil
	})
	if err != nil {
		return Run{}, err
	}
	if len(jobs) == 0 {
		return Run{}, domain.Errorf(domain.ENotFound, "job %s of run %s not found", jobID, runID)
	}
	nr := NewRun{Project: old.Project, GitSHA: old.GitSHA, GitRef: old.GitRef, GitDirty: old.GitDirty,
		Source: domain.Source{BlobDigest: old.SourceDigest, ManifestDigest: old.ManifestDigest}}
	var secrets bool
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(source_size, 0), secrets_allowed FROM runs WHERE id = $1`, runID).
		Scan(&nr.Source.Size, &secrets); err != nil {
		return Run{}, err
	}
	// A retry of a fork's run stays without secrets.
	nr.NoSecrets = !secrets
	if jobID == "" {
		nr.Trigger = fmt.Sprintf("retry of #%d by %s", old.Number, who)
	} else {
		j := jobs[0]
		if len(j.Spec.NeedArtifacts) > 0 {
			return Run{}, domain.Errorf(domain.EInvalid, "job %s downloads artifacts of the jobs it needs; retry the whole run instead", j.Name)
		}
		// Alone in its new run, the job needs nothing.
		jobs[0].Needs = nil
		jobs = jobs[:1]
		nr.Trigger = fmt.Sprintf("retry of #%d %s by %s", old.Number, j.Name, who)
	}
	for _, j := range jobs {
		nr.Jobs = append(nr.Jobs, j.NewJob)
	}
	return s.CreateRun(ctx, nr)
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

// ListUsers returns every user.
func (s *Store) ListUsers(ctx context.Context) ([]UserInfo, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT u.id, u.name, u.role, u.created_at, u.disabled_at,
		       (SELECT count(*) FROM user_tokens t WHERE t.user_id = u.id AND t.revoked_at IS NULL)
		FROM users u ORDER BY u.name`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (UserInfo, error) {
		var u UserInfo
		err := row.Scan(&u.ID, &u.Name, &u.Role, &u.CreatedAt, &u.DisabledAt, &u.Tokens)
		return u, err
	})
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
