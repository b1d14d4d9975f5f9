package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/wake"
)

// GitHub webhook deliveries: recorded once, then leased by workers (the
// lease's expiry is the database's now(), as for jobs) until each makes a
// run, is ignored or fails.

// recordDeliverySQL stores a delivery unless its GUID, or its very body
// for its repository, was recorded before (a redelivery or a replay), or
// is a push body remembered after its delivery was collected; a push's
// body is remembered. It answers 1 if it stored the delivery, and whether
// one recorded before under this GUID is still pending (the snapshot does
// not see the row it stores).
const recordDeliverySQL = `
WITH ins AS (
    INSERT INTO scm_deliveries (guid, event, repository_id, payload, body_sha256)
    SELECT $1, $2, $3, $4, $5
    WHERE NOT EXISTS (SELECT 1 FROM scm_push_bodies WHERE repository_id = $3 AND body_sha256 = $5)
    ON CONFLICT DO NOTHING
    RETURNING 1
), kept AS (
    INSERT INTO scm_push_bodies (repository_id, body_sha256)
    SELECT $3, $5 WHERE $2 = 'push' AND EXISTS (SELECT 1 FROM ins)
    ON CONFLICT DO NOTHING
)
SELECT (SELECT count(*) FROM ins), EXISTS (SELECT 1 FROM scm_deliveries WHERE guid = $1 AND state = 'PENDING')`

// A push body is remembered PushMemory after its delivery; a push GitHub
// took more than PushHorizon before, or before the push bodies were
// first remembered (PushesRememberedSince), is refused by its age (scm's
// Worker.replayed): so every push body still taken is remembered once
// taken, and its replay, however late, is known.
const (
	PushHorizon = 3 * 365 * 24 * time.Hour
	PushMemory  = PushHorizon + 35*24*time.Hour
)

// pushMemorySQL is when push bodies began to be remembered (NULL: always).
const pushMemorySQL = `SELECT nullif(min(started_at), '-infinity') FROM scm_push_memory`

// PushesRememberedSince is when ForgeCI began to remember push bodies (the
// oldest push delivery it still had then): a push GitHub took before it
// may have been delivered, and forgotten, already. Zero: always (an
// installation that had none).
func (s *Store) PushesRememberedSince(ctx context.Context) (time.Time, error) {
	var t *time.Time
	err := s.pool.QueryRow(ctx, pushMemorySQL).Scan(&t)
	if err != nil {
		return time.Time{}, fmt.Errorf("push memory: %w", err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// claimDeliverySQL leases the oldest due pending delivery for $1 seconds
// (one whose lease expired is due again), counting an attempt.
const claimDeliverySQL = `
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
          d.received_at, d.lease_id::text`

// finishDeliverySQL ends delivery $1 in state $3, only under its lease $2.
const finishDeliverySQL = `
UPDATE scm_deliveries SET state = $3, run_id = nullif($4, ''), note = nullif($5, ''),
       finished_at = now(), lease_id = NULL, lease_expires_at = NULL
WHERE guid = $1 AND lease_id = $2 AND state = 'PENDING'`

// lockDeliverySQL locks delivery $1 if lease $2 is still its lease.
const lockDeliverySQL = `SELECT state FROM scm_deliveries WHERE guid = $1 AND lease_id = $2 FOR UPDATE`

const deliveryErrorSQL = `UPDATE scm_deliveries SET last_error = $2 WHERE guid = $1`

// insertDeliveryNoticeSQL queues the failing check run that tells a
// commit's author why delivery $1 made no run: once per commit (another
// event at it, an edited title or a label, would say the same again, and
// cost a check run each). The unique index check_runs_notices decides,
// so that two deliveries failing at once for one commit queue one notice.
const insertDeliveryNoticeSQL = `
INSERT INTO check_runs (delivery_guid, repository_id, head_sha, name, summary)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING`

// retryDeliveryLaterSQL releases delivery $1's lease $2 with error $3,
// due again after $4 seconds.
const retryDeliveryLaterSQL = `
UPDATE scm_deliveries SET last_error = $3, lease_id = NULL, lease_expires_at = NULL,
       next_attempt_at = now() + make_interval(secs => $4)
WHERE guid = $1 AND lease_id = $2 AND state = 'PENDING'`

// listDeliveriesSQL is a page of the deliveries of the projects user $3
// may read, in state $1 (empty: any), newest first, before the cursor
// ($4, $5; empty for the first page), at most $2.
const listDeliveriesSQL = `
SELECT d.guid, d.event, d.repository_id, d.state, d.attempts, coalesce(d.last_error, ''), coalesce(d.run_id, ''),
       coalesce(d.note, ''), d.received_at
FROM scm_deliveries d JOIN scm_repositories r ON r.github_id = d.repository_id
WHERE ($1 = '' OR d.state = $1) AND project_rank($3, r.project_id) >= 1
  AND ($4 = '' OR (d.received_at, d.guid) < ($4::timestamptz, $5))
ORDER BY d.received_at DESC, d.guid DESC LIMIT $2`

// deliveryProjectSQL is the project of delivery $1's repository.
const deliveryProjectSQL = `
SELECT r.project_id FROM scm_deliveries d JOIN scm_repositories r ON r.github_id = d.repository_id
WHERE d.guid = $1`

// retryDeliverySQL puts FAILED delivery $1 back to PENDING, due now, with
// fresh attempts.
const retryDeliverySQL = `
UPDATE scm_deliveries SET state = 'PENDING', attempts = 0, next_attempt_at = now(), finished_at = NULL, note = NULL
WHERE guid = $1 AND state = 'FAILED'`

// Delivery states.
const (
	DeliveryPending = "PENDING"
	DeliveryDone    = "DONE"
	DeliveryIgnored = "IGNORED"
	DeliveryFailed  = "FAILED"
)

// deliveryStates are the states a delivery may be in, for the filter.
var deliveryStates = []string{DeliveryPending, DeliveryDone, DeliveryIgnored, DeliveryFailed}

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

// Recorded is what RecordDelivery did with a delivery.
type Recorded struct {
	// New: stored now. False when a delivery with this GUID, or with
	// this very body for this repository, was already recorded (a
	// redelivery, or a captured body replayed under a new GUID): nothing
	// new is stored.
	New bool
	// Waiting: it waits for the GitHub worker (new, or redelivered while
	// still pending), which was noted unless Unnoted says why not.
	Waiting bool
	Unnoted error
}

// RecordDelivery stores a verified delivery once, and notes the GitHub
// worker for it (again for a redelivery of one still pending). The note
// is made after the insert, so that a delivery is never refused for S3's
// sake: the webhook also kicks the worker, whose kicked invocations run
// whatever the notes say (scheduled.RunKicked).
func (s *Store) RecordDelivery(ctx context.Context, guid, event string, repositoryID int64, payload []byte) (Recorded, error) {
	sum := sha256.Sum256(payload)
	var stored int
	var pending bool
	if err := s.pool.QueryRow(ctx, recordDeliverySQL, guid, event, repositoryID, payload, sum[:]).Scan(&stored, &pending); err != nil {
		return Recorded{}, fmt.Errorf("record delivery: %w", err)
	}
	rec := Recorded{New: stored == 1, Waiting: stored == 1 || pending}
	if s.board != nil && rec.Waiting {
		rec.Unnoted = s.board.Mark(ctx, s.board.Now(), wake.SCM)
	}
	return rec, nil
}

// ClaimDelivery leases the oldest due pending delivery for ttl, or returns
// nil. A delivery whose lease expired (its worker died) is due again: the
// claim counts an attempt, so a delivery that kills its workers still ends.
func (s *Store) ClaimDelivery(ctx context.Context, ttl time.Duration) (*Delivery, error) {
	var d Delivery
	err := s.pool.QueryRow(ctx, claimDeliverySQL, ttl.Seconds()).Scan(&d.GUID, &d.Event, &d.RepositoryID, &d.Payload, &d.State, &d.Attempts, &d.LastError, &d.ReceivedAt, &d.LeaseID)
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
	tag, err := tx.Exec(ctx, finishDeliverySQL, d.GUID, d.LeaseID, state, runID, note)
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
	return s.queueRun(ctx, func(tx pgx.Tx) (Run, error) {
		// Lock the delivery first: a second worker's commit waits here and
		// then finds the lease gone.
		var state string
		err := tx.QueryRow(ctx, lockDeliverySQL, d.GUID, d.LeaseID).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && state != DeliveryPending) {
			return Run{}, ErrDeliveryLeaseLost
		}
		if err != nil {
			return Run{}, err
		}
		run, err := s.createRunTx(ctx, tx, nr)
		if err != nil {
			return Run{}, err
		}
		if err := supersedeWaiting(ctx, tx, &run, nr.Checks); err != nil {
			return Run{}, err
		}
		return run, finishDeliveryTx(ctx, tx, d, DeliveryDone, run.ID, "")
	})
}

// FailDeliveryWithNotice fails a delivery whose commit cannot make a run
// (its pipeline file is missing or invalid) and, in the same transaction,
// queues a failing check run on the commit that says why.
func (s *Store) FailDeliveryWithNotice(ctx context.Context, d *Delivery, cause error, headSHA, checkName string) error {
	msg := domain.Truncate(cause.Error(), 4000)
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deliveryErrorSQL, d.GUID, msg); err != nil {
			return err
		}
		if err := finishDeliveryTx(ctx, tx, d, DeliveryFailed, "", "no run: the commit's pipeline is not valid"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, insertDeliveryNoticeSQL, d.GUID, d.RepositoryID, headSHA, checkName, msg)
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
	msg := domain.Truncate(cause.Error(), 4000)
	if permanent || d.Attempts >= maxAttempts {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, deliveryErrorSQL, d.GUID, msg); err != nil {
				return err
			}
			return finishDeliveryTx(ctx, tx, d, DeliveryFailed, "", fmt.Sprintf("failed after %d attempt(s)", d.Attempts))
		})
	}
	tag, err := s.pool.Exec(ctx, retryDeliveryLaterSQL, d.GUID, d.LeaseID, msg, backoff.Seconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrDeliveryLeaseLost
	}
	return nil
}

// Deliveries lists a page of the deliveries of the projects u may read,
// newest first, optionally in one state. A state no delivery can be in is
// refused rather than answered with an empty list.
func (s *Store) Deliveries(ctx context.Context, u User, state string, pg Page) ([]Delivery, string, error) {
	if state != "" && !slices.Contains(deliveryStates, state) {
		return nil, "", domain.Errorf(domain.EInvalid, "state must be one of %s, not %q", strings.Join(deliveryStates, ", "), state)
	}
	limit, after, err := pg.parseTimed(2, 0) // received_at, guid
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, listDeliveriesSQL, state, limit+1, u.ID, after[0], after[1])
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
		err := tx.QueryRow(ctx, deliveryProjectSQL, guid).Scan(&projectID)
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
		tag, err := tx.Exec(ctx, retryDeliverySQL, guid)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return domain.Errorf(domain.EConflict, "delivery %q is not FAILED", guid)
		}
		return nil
	})
}
