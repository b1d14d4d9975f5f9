package store

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// The notification outbox: rows written by the transaction that ends a
// run (the runs_notify trigger, migration 00021), delivered under a lease
// by notify.Deliverer. A delivery whose answer was lost is sent again
// when its lease ends (receivers dedupe by its ID); one that keeps
// failing ends FAILED with its last error, visible to the project's
// members.

// claimNotificationsSQL leases up to $1 due deliveries for $2 seconds, the
// first due of each hook (no burst: they are sent at once), with
// what sending each needs, counting the attempt now: one whose sender
// stops before recording it (a Lambda's deadline) still counts, so no
// delivery is tried more than $3 times. FOR UPDATE allows no DISTINCT:
// the rows chosen are locked after, and checked again.
const claimNotificationsSQL = `
WITH first AS (
    SELECT DISTINCT ON (hook_id) id, next_attempt_at FROM notifications
    WHERE state = 'PENDING' AND next_attempt_at <= now() AND attempts < $3
      AND (lease_expires_at IS NULL OR lease_expires_at < now())
    ORDER BY hook_id, next_attempt_at, id
), due AS (
    SELECT n.id FROM notifications n JOIN (SELECT id FROM first ORDER BY next_attempt_at, id LIMIT $1) f ON f.id = n.id
    WHERE n.state = 'PENDING' AND n.next_attempt_at <= now() AND n.attempts < $3
      AND (n.lease_expires_at IS NULL OR n.lease_expires_at < now())
    FOR UPDATE OF n SKIP LOCKED
), leased AS (
    UPDATE notifications n SET attempts = n.attempts + 1, lease_id = gen_random_uuid(),
                               lease_expires_at = now() + make_interval(secs => $2)
    FROM due WHERE n.id = due.id
    RETURNING n.*
)
SELECT l.id, l.lease_id::text, l.attempts, l.event, h.url, h.format, h.secret,
       p.name, r.id, r.number, r.state, r.trigger, coalesce(r.git_ref, ''), coalesce(r.git_sha, ''), r.finished_at
FROM leased l JOIN notify_hooks h ON h.id = l.hook_id JOIN runs r ON r.id = l.run_id JOIN projects p ON p.id = l.project_id`

// abandonedNotificationsSQL ends FAILED the deliveries whose last allowed
// attempt ($1) was claimed and never recorded, once its lease is over.
const abandonedNotificationsSQL = `
UPDATE notifications SET state = 'FAILED', lease_id = NULL, lease_expires_at = NULL,
       last_error = 'the last attempt ended without an outcome: the sender stopped before the hook answered'
WHERE state = 'PENDING' AND attempts >= $1 AND lease_expires_at < now()`

// notificationDoneSQL ends delivery $1 under lease $2 (its attempt was
// counted at the claim): DELIVERED with the status $3, or (when $4 is not
// NULL) FAILED after $6 attempts, else due again in $5 seconds.
const notificationDoneSQL = `
UPDATE notifications SET last_status = nullif($3, 0), last_error = $4,
       state = CASE WHEN $4::text IS NULL THEN 'DELIVERED' WHEN attempts >= $6 THEN 'FAILED' ELSE 'PENDING' END,
       delivered_at = CASE WHEN $4::text IS NULL THEN now() END,
       next_attempt_at = now() + make_interval(secs => $5), lease_id = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_id = $2::uuid`

// NotifyWork is one leased delivery.
type NotifyWork struct {
	ID       int64
	LeaseID  string
	Attempts int
	Event    string
	URL      string
	Format   string
	Secret   string
	// The run it announces.
	Project    string
	RunID      string
	RunNumber  int64
	RunState   string
	Trigger    string
	GitRef     string
	GitSHA     string
	FinishedAt *time.Time
}

// ClaimNotifications leases up to limit due deliveries for ttl, each
// tried at most maxAttempts times; Attempts is the number of this one.
// Deliveries whose last attempt was never recorded end FAILED first.
func (s *Store) ClaimNotifications(ctx context.Context, limit int, ttl time.Duration, maxAttempts int) ([]NotifyWork, error) {
	if _, err := s.pool.Exec(ctx, abandonedNotificationsSQL, maxAttempts); err != nil {
		return nil, fmt.Errorf("fail abandoned notifications: %w", err)
	}
	rows, err := s.pool.Query(ctx, claimNotificationsSQL, limit, ttl.Seconds(), maxAttempts)
	if err != nil {
		return nil, fmt.Errorf("claim notifications: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (NotifyWork, error) {
		var w NotifyWork
		err := row.Scan(&w.ID, &w.LeaseID, &w.Attempts, &w.Event, &w.URL, &w.Format, &w.Secret,
			&w.Project, &w.RunID, &w.RunNumber, &w.RunState, &w.Trigger, &w.GitRef, &w.GitSHA, &w.FinishedAt)
		return w, err
	})
}

// NotificationDone records the outcome of a delivery's attempt under its
// lease: sent (cause nil) or not, with the receiver's status (0: none came
// back); a failed one is due again after backoff, or FAILED after
// maxAttempts.
// ErrCheckLeaseLost when the lease has moved on.
func (s *Store) NotificationDone(ctx context.Context, w NotifyWork, status int, cause error, backoff time.Duration, maxAttempts int) error {
	var why *string
	if cause != nil {
		msg := domain.Truncate(cause.Error(), 500)
		why = &msg
	}
	tag, err := s.pool.Exec(ctx, notificationDoneSQL, w.ID, w.LeaseID, status, why, backoff.Seconds(), maxAttempts)
	if err != nil {
		return fmt.Errorf("notification %d: %w", w.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrCheckLeaseLost
	}
	return nil
}

// NotificationInfo is a delivery as a project's members see it.
type NotificationInfo struct {
	ID    int64  `json:"id"`
	Event string `json:"event"`
	// HookHost is where it goes: the hook's scheme and host only (a
	// hook's path may hold a token, as Slack's do).
	HookHost    string     `json:"hook_host"`
	RunID       string     `json:"run_id"`
	RunNumber   int64      `json:"run_number"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	LastStatus  *int       `json:"last_status,omitempty"`
	LastError   *string    `json:"last_error,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
}

// notificationsSQL is a page of project $1's deliveries, newest first,
// before id $2 (0: from the newest), at most $3.
const notificationsSQL = `
SELECT n.id, n.event, h.url, n.run_id, r.number, n.state, n.attempts, n.last_status, n.last_error, n.created_at, n.delivered_at
FROM notifications n JOIN notify_hooks h ON h.id = n.hook_id JOIN runs r ON r.id = n.run_id
WHERE n.project_id = $1 AND ($2 = 0 OR n.id < $2)
ORDER BY n.id DESC LIMIT $3`

// Notifications lists a page of the deliveries of a project u may read,
// newest first.
func (s *Store) Notifications(ctx context.Context, u User, project string, pg Page) ([]NotificationInfo, string, error) {
	limit, after, err := pg.parse(1)
	if err != nil {
		return nil, "", err
	}
	var before int64
	if after[0] != "" {
		if _, err := fmt.Sscan(after[0], &before); err != nil {
			return nil, "", domain.Errorf(domain.EInvalid, "cursor is not one this list made")
		}
	}
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, notificationsSQL, p.ID, before, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("notifications: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NotificationInfo, error) {
		var n NotificationInfo
		var hook string
		err := row.Scan(&n.ID, &n.Event, &hook, &n.RunID, &n.RunNumber, &n.State, &n.Attempts, &n.LastStatus,
			&n.LastError, &n.CreatedAt, &n.DeliveredAt)
		if u, perr := url.Parse(hook); perr == nil {
			n.HookHost = u.Scheme + "://" + u.Host
		}
		return n, err
	})
	if err != nil {
		return nil, "", err
	}
	list, next := trim(list, limit, func(n NotificationInfo) []string { return []string{fmt.Sprint(n.ID)} })
	return list, next, nil
}
