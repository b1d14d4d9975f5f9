package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// MaxClaimWait bounds long-polling (DESIGN.md: wait_seconds 0-20).
const MaxClaimWait = 20 * time.Second

// claimSQL leases the oldest queued job whose labels the runner covers, in
// one statement: SKIP LOCKED lets concurrent claimers pass each other, the
// generation goes up by one, the lease ID is fresh and random, the expiry
// comes from the database clock, and the attempt row is written alongside.
const claimSQL = `
WITH candidate AS (
    SELECT id FROM jobs
    WHERE state = 'QUEUED' AND labels <@ $2::text[]
    ORDER BY queued_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE jobs j
    SET state = 'RUNNING', runner_id = $1, lease_id = gen_random_uuid(),
        generation = j.generation + 1,
        lease_expires_at = now() + make_interval(secs => $3),
        started_at = now(), log_size = 0, reason = NULL, exit_code = NULL
    FROM candidate c
    WHERE j.id = c.id
    RETURNING j.id, j.run_id, j.name, j.generation, j.lease_id, j.lease_expires_at,
              j.needs, j.spec, j.timeout_seconds, j.runner_id
), attempt AS (
    INSERT INTO job_attempts (job_id, generation, runner_id, lease_id, started_at)
    SELECT id, generation, runner_id, lease_id, now() FROM claimed
), run_started AS (
    UPDATE runs r SET state = 'RUNNING', started_at = now()
    FROM claimed c
    WHERE r.id = c.run_id AND r.state = 'PENDING'
)
SELECT c.id, c.run_id, c.name, c.generation, c.lease_id::text, c.lease_expires_at,
       c.needs, c.spec, c.timeout_seconds,
       coalesce(r.source_digest, ''), coalesce(r.manifest_digest, ''), coalesce(r.source_size, 0)
FROM claimed c JOIN runs r ON r.id = c.run_id`

// Claim leases one job for runner whose labels cover the job's labels. If
// labels is not empty it narrows the runner's registered labels (it may not
// add to them). With wait > 0 it long-polls: it retries the claim until a job
// is found or wait passes, holding no transaction or lock while it waits.
// It returns nil, nil when no job matched.
func (s *Store) Claim(ctx context.Context, runner Runner, labels []string, wait time.Duration) (*domain.Claim, error) {
	effective, err := effectiveLabels(runner, labels)
	if err != nil {
		return nil, err
	}
	if wait < 0 || wait > MaxClaimWait {
		return nil, domain.Errorf(domain.EInvalid, "wait_seconds must be between 0 and %d", int(MaxClaimWait.Seconds()))
	}
	s.touchRunner(ctx, runner.ID)
	deadline := time.Now().Add(wait)
	delay := 50 * time.Millisecond
	for {
		c, err := s.claimOnce(ctx, runner.ID, effective)
		if err != nil || c != nil {
			return c, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-s.queued():
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

func effectiveLabels(runner Runner, requested []string) ([]string, error) {
	if err := ValidateLabels(requested); err != nil {
		return nil, err
	}
	if len(requested) == 0 {
		return append([]string{}, runner.Labels...), nil
	}
	for _, l := range requested {
		if !slices.Contains(runner.Labels, l) {
			return nil, domain.Errorf(domain.EInvalid, "label %q is not registered for this runner", l)
		}
	}
	return requested, nil
}

func (s *Store) claimOnce(ctx context.Context, runnerID string, labels []string) (*domain.Claim, error) {
	var (
		c       domain.Claim
		spec    []byte
		expires time.Time
	)
	err := s.pool.QueryRow(ctx, claimSQL, runnerID, labels, s.limits.LeaseTTL.Seconds()).Scan(
		&c.Job.ID, &c.Job.RunID, &c.Job.Name, &c.Lease.Generation, &c.Lease.LeaseID, &expires,
		&c.Job.Needs, &spec, &c.Job.TimeoutSeconds,
		&c.Source.BlobDigest, &c.Source.ManifestDigest, &c.Source.Size)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if err := json.Unmarshal(spec, &c.Job.JobSpec); err != nil {
		return nil, fmt.Errorf("claim: decode spec of job %s: %w", c.Job.ID, err)
	}
	c.Lease.RunID, c.Lease.JobID, c.Lease.RunnerID = c.Job.RunID, c.Job.ID, runnerID
	c.Lease.ExpiresAt = &expires
	return &c, nil
}

// touchRunner records that a runner asked for work; at most every 10s, so
// that busy runners do not turn every claim into a write on their row.
func (s *Store) touchRunner(ctx context.Context, runnerID string) {
	// Best effort: last_seen_at is for humans; a failure must not fail the claim.
	_, _ = s.pool.Exec(ctx, `
		UPDATE runners SET last_seen_at = now()
		WHERE id = $1 AND (last_seen_at IS NULL OR last_seen_at < now() - interval '10 seconds')`, runnerID)
}
