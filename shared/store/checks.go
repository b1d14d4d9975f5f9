package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// GitHub check runs: an outbox of rows, one per job of a run from GitHub
// (and one per delivery that made no run), leased by the reconciler that
// pushes each job's state to GitHub. A job's change bumps its row's
// version (a trigger, migrations); a push records the version it showed.

// claimChecksSQL leases up to $1 check runs whose job changed since they
// were last pushed, for $2 seconds, with what each should show.
const claimChecksSQL = `
WITH due AS (
    SELECT id FROM check_runs
    WHERE version > pushed_version AND next_attempt_at <= now()
      AND (lease_expires_at IS NULL OR lease_expires_at < now())
    ORDER BY next_attempt_at LIMIT $1
    FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE check_runs c SET lease_id = gen_random_uuid(), lease_expires_at = now() + make_interval(secs => $2)
    FROM due WHERE c.id = due.id
    RETURNING c.*
)
SELECT l.id, coalesce(l.job_id, ''), coalesce(l.job_id, 'delivery:' || l.delivery_guid), coalesce(l.summary, ''),
       l.lease_id::text, l.version, coalesce(l.github_id, 0), l.create_attempted, l.attempts, l.gone_attempts,
       r.github_id, r.full_name, r.installation_id, l.head_sha, l.name,
       coalesce(j.run_id, ''), coalesce(ru.number, 0), p.name, coalesce(j.state, 'FAILED'),
       coalesce(j.reason, ''), j.exit_code, coalesce(j.generation, 0), j.started_at, j.finished_at,
       coalesce(ru.approval, 'none'), coalesce(ru.approval_by, ''), ru.approval_at, rep.summary
FROM leased l
JOIN scm_repositories r ON r.github_id = l.repository_id
LEFT JOIN jobs j ON j.id = l.job_id
LEFT JOIN runs ru ON ru.id = j.run_id
LEFT JOIN job_reports rep ON rep.job_id = j.id AND rep.generation = j.generation
JOIN projects p ON p.id = r.project_id`

// runCheckTargetSQL is where run $1's jobs are mirrored: the repository
// and commit of its check runs, if it has any.
const runCheckTargetSQL = `
SELECT c.repository_id, c.head_sha FROM check_runs c JOIN jobs j ON j.id = c.job_id WHERE j.run_id = $1 LIMIT 1`

// runCheckTarget is where run runID's jobs are mirrored to GitHub, nil if
// they are not: a retry of the run is mirrored to the same commit, so that
// its passing replaces the failed check runs (GitHub shows the newest of
// each name).
func runCheckTarget(ctx context.Context, tx pgx.Tx, runID string) (*CheckTarget, error) {
	var t CheckTarget
	err := tx.QueryRow(ctx, runCheckTargetSQL, runID).Scan(&t.RepositoryID, &t.HeadSHA)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check runs of run %s: %w", runID, err)
	}
	return &t, nil
}

// The updates of a leased check run: $1 its ID, $2 its lease.

// checkCreateAttemptedSQL is committed before a create is sent.
const checkCreateAttemptedSQL = `UPDATE check_runs SET create_attempted = true WHERE id = $1 AND lease_id = $2`

// checkPushedSQL records that GitHub shows version $3 (check run $4) and
// releases the lease.
const checkPushedSQL = `
UPDATE check_runs SET pushed_version = greatest(pushed_version, $3), github_id = $4,
       attempts = 0, gone_attempts = 0, revived = false, last_error = NULL, lease_id = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_id = $2`

// checkFailedSQL records a failed push of version $6 (error $4; the check
// run's ID $3 if learnt; refused as gone if $7), due again after $5
// seconds, and releases the lease. A job change during the push (a
// version after $6) has started the counts again and is due now.
const checkFailedSQL = `
UPDATE check_runs SET github_id = coalesce(nullif($3::bigint, 0), github_id), last_error = $4,
       attempts = CASE WHEN version > $6 THEN attempts ELSE attempts + 1 END,
       gone_attempts = CASE WHEN version > $6 OR NOT $7 THEN 0 ELSE gone_attempts + 1 END,
       next_attempt_at = CASE WHEN version > $6 THEN now() ELSE now() + make_interval(secs => $5) END,
       lease_id = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_id = $2`

// checkGivenUpSQL records a check run's last failed push (error $4; its ID
// $3 if learnt) of version $5: not due again until its job changes
// (check_runs_bump, which also starts its attempts again; a change during
// the push left a version after $5, still due), and releases the lease.
const checkGivenUpSQL = `
UPDATE check_runs SET github_id = coalesce(nullif($3::bigint, 0), github_id), attempts = attempts + 1,
       gone_attempts = gone_attempts + 1, pushed_version = greatest(pushed_version, $5), last_error = $4,
       lease_id = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_id = $2`

// reviveRefusedSQL makes due now the check runs of repository $1 refused
// as gone at least $2 times in a row (waiting hours, or given up: given a
// version after the one pushed) and not revived since their job changed
// or they were pushed; at most 100 at a time (the oldest), so that an App
// back after a month of refusals is not one burst of pushes: each one
// GitHub takes revives the next. Rows another transaction holds (a job
// change, which makes its row due itself; a push under way) are skipped,
// so that it never waits for a lock.
const reviveRefusedSQL = `
UPDATE check_runs SET next_attempt_at = now(), version = greatest(version, pushed_version + 1), revived = true
WHERE id IN (SELECT id FROM check_runs
             WHERE repository_id = $1 AND gone_attempts > 0 AND gone_attempts >= $2 AND NOT revived
               AND (lease_expires_at IS NULL OR lease_expires_at < now())
             ORDER BY id LIMIT 100
             FOR UPDATE SKIP LOCKED)`

// checksOfRunSQL lists the check runs of run $1's jobs.
const checksOfRunSQL = `
SELECT c.job_id, c.name, coalesce(c.github_id, 0), c.version, c.pushed_version, coalesce(c.last_error, '')
FROM check_runs c JOIN jobs j ON j.id = c.job_id WHERE j.run_id = $1 ORDER BY c.name`

// CheckWork is a check run due to be pushed to GitHub, with the job state it
// should show.
type CheckWork struct {
	ID int64
	// JobID is the job shown; empty for a delivery's notice, whose
	// failing summary is Notice.
	JobID           string
	ExternalID      string // the job ID, or "delivery:<guid>"
	Notice          string
	LeaseID         string
	Version         int64
	GitHubID        int64 // 0 when not yet known
	CreateAttempted bool
	Attempts        int
	// GoneAttempts are the failed pushes in a row GitHub refused as gone.
	GoneAttempts   int
	RepoID         int64 // the repository's GitHub ID
	RepoFullName   string
	InstallationID int64
	HeadSHA        string
	Name           string
	// The job as it is now: the desired state.
	RunID      string
	RunNumber  int64
	Project    string
	JobState   string
	Reason     string
	ExitCode   *int
	Generation int
	StartedAt  *time.Time
	FinishedAt *time.Time
	// Report is the attempt's test report summary (nil: none), shown
	// in the check run with an annotation at each failure's file:line.
	Report *protocol.TestSummary
	// The run's approval: approved or rejected by whom and when, for a
	// run from a first-time contributor.
	Approval   string
	ApprovalBy string
	ApprovalAt *time.Time
}

// ClaimChecks leases up to limit check runs whose job changed since they
// were last pushed. The version is read under the lease: a job change during
// the push bumps it again, and the row stays due.
func (s *Store) ClaimChecks(ctx context.Context, limit int, ttl time.Duration) ([]CheckWork, error) {
	rows, err := s.pool.Query(ctx, claimChecksSQL, limit, ttl.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim checks: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (CheckWork, error) {
		var w CheckWork
		err := row.Scan(&w.ID, &w.JobID, &w.ExternalID, &w.Notice, &w.LeaseID, &w.Version, &w.GitHubID, &w.CreateAttempted,
			&w.Attempts, &w.GoneAttempts, &w.RepoID, &w.RepoFullName, &w.InstallationID, &w.HeadSHA, &w.Name,
			&w.RunID, &w.RunNumber, &w.Project, &w.JobState, &w.Reason, &w.ExitCode, &w.Generation,
			&w.StartedAt, &w.FinishedAt, &w.Approval, &w.ApprovalBy, &w.ApprovalAt, &w.Report)
		return w, err
	})
}

// ErrCheckLeaseLost means another reconciler holds the check run now.
var ErrCheckLeaseLost = domain.Errorf(domain.EConflict, "check run lease lost")

// checkUpdate runs one of the statements above on w's row, $1 and $2
// being its ID and lease.
func (s *Store) checkUpdate(ctx context.Context, w CheckWork, sql string, args ...any) error {
	tag, err := s.pool.Exec(ctx, sql, append([]any{w.ID, w.LeaseID}, args...)...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrCheckLeaseLost
	}
	return nil
}

// MarkCheckCreateAttempted is committed before a create is sent to GitHub,
// so that if the response is lost the next attempt looks the check run up.
func (s *Store) MarkCheckCreateAttempted(ctx context.Context, w CheckWork) error {
	return s.checkUpdate(ctx, w, checkCreateAttemptedSQL)
}

// CheckPushed records that GitHub shows version of the job (and the check
// run's ID), and releases the lease.
func (s *Store) CheckPushed(ctx context.Context, w CheckWork, githubID int64) error {
	return s.checkUpdate(ctx, w, checkPushedSQL, w.Version, githubID)
}

// CheckFailed records a failed push, refused as gone if gone; the row is
// due again after backoff.
// The ID, if learnt before the failure, is kept.
func (s *Store) CheckFailed(ctx context.Context, w CheckWork, githubID int64, cause error, backoff time.Duration, gone bool) error {
	return s.checkUpdate(ctx, w, checkFailedSQL, githubID, domain.Truncate(cause.Error(), 4000), backoff.Seconds(), w.Version, gone)
}

// CheckGivenUp records the last push of a check run GitHub keeps refusing:
// it is not tried again until its job changes.
func (s *Store) CheckGivenUp(ctx context.Context, w CheckWork, githubID int64, cause error) error {
	return s.checkUpdate(ctx, w, checkGivenUpSQL, githubID, domain.Truncate(cause.Error(), 4000), w.Version)
}

// ReviveRefusedChecks makes due now the check runs of a repository that
// GitHub refused as gone at least refusals times in a row, once each
// until its job changes or it is pushed; it returns how many.
func (s *Store) ReviveRefusedChecks(ctx context.Context, repoID int64, refusals int) (int64, error) {
	tag, err := s.pool.Exec(ctx, reviveRefusedSQL, repoID, refusals)
	if err != nil {
		return 0, fmt.Errorf("revive the refused check runs of repository %d: %w", repoID, err)
	}
	return tag.RowsAffected(), nil
}

// CheckStatus is a check run's outbox row, for tests and admins.
type CheckStatus struct {
	JobID         string
	Name          string
	GitHubID      int64
	Version       int64
	PushedVersion int64
	LastError     string
}

// ChecksOfRun returns the outbox rows of a run's jobs.
func (s *Store) ChecksOfRun(ctx context.Context, runID string) ([]CheckStatus, error) {
	rows, err := s.pool.Query(ctx, checksOfRunSQL, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (CheckStatus, error) {
		var c CheckStatus
		err := row.Scan(&c.JobID, &c.Name, &c.GitHubID, &c.Version, &c.PushedVersion, &c.LastError)
		return c, err
	})
}
