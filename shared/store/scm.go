package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

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

var fullNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)

// AddRepository registers (or updates) a repository for an existing
// project, named by r.Project.
func (s *Store) AddRepository(ctx context.Context, r Repository) error {
	switch {
	case r.GitHubID <= 0:
		return domain.Errorf(domain.EInvalid, "the GitHub repository ID must be a positive integer")
	case !fullNameRE.MatchString(r.FullName):
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
	_, err = s.pool.Exec(ctx, `
		INSERT INTO scm_repositories (github_id, full_name, installation_id, webhook_secret, project_id)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (github_id) DO UPDATE SET full_name = $2, installation_id = $3, webhook_secret = $4, project_id = $5`,
		r.GitHubID, r.FullName, r.InstallationID, r.WebhookSecret, projectID)
	if isUniqueViolation(err) {
		return domain.Errorf(domain.EConflict, "another repository is registered as %s", r.FullName)
	}
	return err
}

// Repository returns a registered repository by its GitHub ID.
func (s *Store) Repository(ctx context.Context, githubID int64) (Repository, error) {
	var r Repository
	err := s.pool.QueryRow(ctx, `
		SELECT r.github_id, r.full_name, r.installation_id, r.webhook_secret, r.project_id, p.name, r.created_at
		FROM scm_repositories r JOIN projects p ON p.id = r.project_id WHERE r.github_id = $1`, githubID).
		Scan(&r.GitHubID, &r.FullName, &r.InstallationID, &r.WebhookSecret, &r.ProjectID, &r.Project, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, domain.Errorf(domain.ENotFound, "repository %d is not registered", githubID)
	}
	return r, err
}

// Delivery states.
const (
	DeliveryPending = "PENDING"
	DeliveryDone    = "DONE"
	DeliveryIgnored = "IGNORED"
	DeliveryFailed  = "FAILED"
)

// Delivery is a recorded webhook delivery.
type Delivery struct {
	GUID         string    `json:"guid"`
	Event        string    `json:"event"`
	RepositoryID int64     `json:"repository_id"`
	Payload      []byte    `json:"-"`
	State        string    `json:"state"`
	Attempts     int       `json:"attempts"`
	LastError    string    `json:"last_error,omitempty"`
	RunID        string    `json:"run_id,omitempty"`
	Note         string    `json:"note,omitempty"`
	ReceivedAt   time.Time `json:"received_at"`
	// LeaseID is set on a claimed delivery.
	LeaseID string `json:"-"`
}

// RecordDelivery stores a verified delivery once. It reports false when a
// delivery with this GUID, or with this very body for this repository, was
// already recorded (a redelivery, or a captured body replayed under a new
// GUID): nothing new is stored and nothing new will happen.
func (s *Store) RecordDelivery(ctx context.Context, guid, event string, repositoryID int64, payload []byte) (bool, error) {
	sum := sha256.Sum256(payload)
	// Either the GUID or the signed body already seen: nothing new.
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO scm_deliveries (guid, event, repository_id, payload, body_sha256) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT DO NOTHING`, guid, event, repositoryID, payload, sum[:])
	if err != nil {
		return false, fmt.Errorf("record delivery: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ClaimDelivery leases the oldest due pending delivery for ttl, or returns
// nil. A delivery whose lease expired (its worker died) is due again: the
// claim counts an attempt, so a delivery that kills its workers still ends.
func (s *Store) ClaimDelivery(ctx context.Context, ttl time.Duration) (*Delivery, error) {
	var d Delivery
	err := s.pool.QueryRow(ctx, `
		UPDATE scm_deliveries d
		SET lease_id = gen_random_uuid(), lease_expires_at = now() + make_interval(secs => $1),
		    attempts = d.attempts + 1
		FROM (SELECT guid FROM scm_deliveries
		      WHERE state = 'PENDING' AND next_attempt_at <= now()
		        AND (lease_expires_at IS NULL OR lease_expires_at < now())
		      ORDER BY next_attempt_at, received_at LIMIT 1
		      FOR UPDATE SKIP LOCKED) due
		WHERE d.guid = due.guid
		RETURNING d.guid, d.event, d.repository_id, d.payload, d.state, d.attempts, coalesce(d.last_error, ''),
		          d.received_at, d.lease_id::text`, ttl.Seconds()).
		Scan(&d.GUID, &d.Event, &d.RepositoryID, &d.Payload, &d.State, &d.Attempts, &d.LastError, &d.ReceivedAt, &d.LeaseID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim delivery: %w", err)
	}
	return &d, nil
}

// ErrDeliveryLeaseLost means the delivery was reclaimed (or finished) by
// another worker; this worker's effect was rolled back.
var ErrDeliveryLeaseLost = domain.Errorf(domain.EConflict, "delivery lease lost")

// finishDeliveryTx marks the claimed delivery finished under its lease.
func finishDeliveryTx(ctx context.Context, tx pgx.Tx, d *Delivery, state, runID, note string) error {
	tag, err := tx.Exec(ctx, `
		UPDATE scm_deliveries SET state = $3, run_id = nullif($4, ''), note = nullif($5, ''),
		       finished_at = now(), lease_id = NULL, lease_expires_at = NULL
		WHERE guid = $1 AND lease_id = $2 AND state = 'PENDING'`, d.GUID, d.LeaseID, state, runID, note)
	if err != nil {
		return fmt.Errorf("finish delivery: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrDeliveryLeaseLost
	}
	return nil
}

// CompleteDeliveryWithRun creates the delivery's run and marks the delivery
// DONE in one transaction, under the delivery's lease: either both happen or
// neither, so a reclaimed delivery can never make a second run.
func (s *Store) CompleteDeliveryWithRun(ctx context.Context, d *Delivery, nr NewRun) (Run, error) {
	var run Run
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Lock the delivery first: a second worker's commit waits here and
		// then finds the lease gone.
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM scm_deliveries WHERE guid = $1 AND lease_id = $2 FOR UPDATE`,
			d.GUID, d.LeaseID).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && state != DeliveryPending) {
			return ErrDeliveryLeaseLost
		}
		if err != nil {
			return err
		}
		if run, err = s.createRunTx(ctx, tx, nr); err != nil {
			return err
		}
		return finishDeliveryTx(ctx, tx, d, DeliveryDone, run.ID, "")
	})
	if err != nil {
		return Run{}, err
	}
	s.signalQueued()
	return run, nil
}

// FailDeliveryWithNotice fails a delivery whose commit cannot make a run
// (its pipeline file is missing or invalid) and, in the same transaction,
// queues a failing check run on the commit that says why.
func (s *Store) FailDeliveryWithNotice(ctx context.Context, d *Delivery, cause error, headSHA, checkName string) error {
	msg := cause.Error()
	if len(msg) > 4000 {
		msg = msg[:4000]
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE scm_deliveries SET last_error = $2 WHERE guid = $1`, d.GUID, msg); err != nil {
			return err
		}
		if err := finishDeliveryTx(ctx, tx, d, DeliveryFailed, "", "no run: the commit's pipeline is not valid"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO check_runs (delivery_guid, repository_id, head_sha, name, summary) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (delivery_guid) DO NOTHING`, d.GUID, d.RepositoryID, headSHA, checkName, msg)
		return err
	})
}

// IgnoreDelivery finishes a delivery that needs no run (a closed pull
// request, a branch deletion), saying why.
func (s *Store) IgnoreDelivery(ctx context.Context, d *Delivery, note string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return finishDeliveryTx(ctx, tx, d, DeliveryIgnored, "", note) })
}

// FailDelivery records a failed attempt. A permanent failure, or the last
// allowed attempt, marks the delivery FAILED with its error for admins;
// otherwise it is retried after backoff.
func (s *Store) FailDelivery(ctx context.Context, d *Delivery, cause error, permanent bool, maxAttempts int, backoff time.Duration) error {
	msg := cause.Error()
	if len(msg) > 4000 {
		msg = msg[:4000]
	}
	if permanent || d.Attempts >= maxAttempts {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE scm_deliveries SET last_error = $2 WHERE guid = $1`, d.GUID, msg); err != nil {
				return err
			}
			return finishDeliveryTx(ctx, tx, d, DeliveryFailed, "", fmt.Sprintf("failed after %d attempt(s)", d.Attempts))
		})
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE scm_deliveries SET last_error = $3, lease_id = NULL, lease_expires_at = NULL,
		       next_attempt_at = now() + make_interval(secs => $4)
		WHERE guid = $1 AND lease_id = $2 AND state = 'PENDING'`, d.GUID, d.LeaseID, msg, backoff.Seconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrDeliveryLeaseLost
	}
	return nil
}

// Deliveries lists a page of the deliveries of the projects u may read,
// newest first, optionally in one state.
func (s *Store) Deliveries(ctx context.Context, u User, state string, pg Page) ([]Delivery, string, error) {
	limit, after, err := pg.parse(2)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT d.guid, d.event, d.repository_id, d.state, d.attempts, coalesce(d.last_error, ''), coalesce(d.run_id, ''),
		       coalesce(d.note, ''), d.received_at
		FROM scm_deliveries d JOIN scm_repositories r ON r.github_id = d.repository_id
		WHERE ($1 = '' OR d.state = $1) AND `+canRead("$3", "r.project_id")+`
		  AND ($4 = '' OR (d.received_at, d.guid) < ($4::timestamptz, $5))
		ORDER BY d.received_at DESC, d.guid DESC LIMIT $2`, state, limit+1, u.ID, after[0], after[1])
	if err != nil {
		return nil, "", err
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := row.Scan(&d.GUID, &d.Event, &d.RepositoryID, &d.State, &d.Attempts, &d.LastError, &d.RunID, &d.Note, &d.ReceivedAt)
		return d, err
	})
	if err != nil {
		return nil, "", err
	}
	ds, next := trim(ds, limit, func(d Delivery) []string { return []string{d.ReceivedAt.Format(time.RFC3339Nano), d.GUID} })
	return ds, next, nil
}

// RetryDelivery puts a FAILED delivery back to PENDING with fresh attempts
// (the cause was fixed). A delivery may make a trusted run, so u needs the
// write role and the secrets permission in its project.
func (s *Store) RetryDelivery(ctx context.Context, u User, guid string) error {
	notFound := domain.Errorf(domain.ENotFound, "delivery %q not found", guid)
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var projectID string
		err := tx.QueryRow(ctx, `
			SELECT r.project_id FROM scm_deliveries d JOIN scm_repositories r ON r.github_id = d.repository_id
			WHERE d.guid = $1`, guid).Scan(&projectID)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound
		}
		if err != nil {
			return err
		}
		a, err := authorize(ctx, tx, u, projectID, RankWrite, "delivery")
		if domain.ErrorCode(err) == domain.ENotFound {
			return notFound
		}
		if err != nil {
			return err
		}
		if !a.Secrets {
			return domain.Errorf(domain.EForbidden, "a delivery can make a trusted run: retrying it needs the project's secrets permission")
		}
		tag, err := tx.Exec(ctx, `
			UPDATE scm_deliveries SET state = 'PENDING', attempts = 0, next_attempt_at = now(), finished_at = NULL, note = NULL
			WHERE guid = $1 AND state = 'FAILED'`, guid)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return domain.Errorf(domain.EConflict, "delivery %q is not FAILED", guid)
		}
		return nil
	})
}

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
	RepoFullName    string
	InstallationID  int64
	HeadSHA         string
	Name            string
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
	rows, err := s.pool.Query(ctx, `
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
		       l.lease_id::text, l.version, coalesce(l.github_id, 0), l.create_attempted, l.attempts,
		       r.full_name, r.installation_id, l.head_sha, l.name,
		       coalesce(j.run_id, ''), coalesce(ru.number, 0), p.name, coalesce(j.state, 'FAILED'),
		       coalesce(j.reason, ''), j.exit_code, coalesce(j.generation, 0), j.started_at, j.finished_at,
		       coalesce(ru.approval, 'none'), coalesce(ru.approval_by, ''), ru.approval_at
		FROM leased l
		JOIN scm_repositories r ON r.github_id = l.repository_id
		LEFT JOIN jobs j ON j.id = l.job_id
		LEFT JOIN runs ru ON ru.id = j.run_id
		JOIN projects p ON p.id = r.project_id`, limit, ttl.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim checks: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (CheckWork, error) {
		var w CheckWork
		err := row.Scan(&w.ID, &w.JobID, &w.ExternalID, &w.Notice, &w.LeaseID, &w.Version, &w.GitHubID, &w.CreateAttempted,
			&w.Attempts, &w.RepoFullName, &w.InstallationID, &w.HeadSHA, &w.Name,
			&w.RunID, &w.RunNumber, &w.Project, &w.JobState, &w.Reason, &w.ExitCode, &w.Generation,
			&w.StartedAt, &w.FinishedAt, &w.Approval, &w.ApprovalBy, &w.ApprovalAt)
		return w, err
	})
}

// ErrCheckLeaseLost means another reconciler holds the check run now.
var ErrCheckLeaseLost = domain.Errorf(domain.EConflict, "check run lease lost")

func (s *Store) checkUpdate(ctx context.Context, w CheckWork, set string, args ...any) error {
	tag, err := s.pool.Exec(ctx, `UPDATE check_runs SET `+set+` WHERE id = $1 AND lease_id = $2`,
		append([]any{w.ID, w.LeaseID}, args...)...)
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
	return s.checkUpdate(ctx, w, `create_attempted = true`)
}

// CheckPushed records that GitHub shows version of the job (and the check
// run's ID), and releases the lease.
func (s *Store) CheckPushed(ctx context.Context, w CheckWork, githubID int64) error {
	return s.checkUpdate(ctx, w, `pushed_version = greatest(pushed_version, $3), github_id = $4,
		attempts = 0, last_error = NULL, lease_id = NULL, lease_expires_at = NULL`, w.Version, githubID)
}

// CheckFailed records a failed push; the row is due again after backoff.
// The ID, if learnt before the failure, is kept.
func (s *Store) CheckFailed(ctx context.Context, w CheckWork, githubID int64, cause error, backoff time.Duration) error {
	return s.checkUpdate(ctx, w, `github_id = coalesce(nullif($3::bigint, 0), github_id), attempts = attempts + 1,
		last_error = $4, next_attempt_at = now() + make_interval(secs => $5), lease_id = NULL, lease_expires_at = NULL`,
		githubID, cause.Error(), backoff.Seconds())
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
	rows, err := s.pool.Query(ctx, `
		SELECT c.job_id, c.name, coalesce(c.github_id, 0), c.version, c.pushed_version, coalesce(c.last_error, '')
		FROM check_runs c JOIN jobs j ON j.id = c.job_id WHERE j.run_id = $1 ORDER BY c.name`, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (CheckStatus, error) {
		var c CheckStatus
		err := row.Scan(&c.JobID, &c.Name, &c.GitHubID, &c.Version, &c.PushedVersion, &c.LastError)
		return c, err
	})
}
