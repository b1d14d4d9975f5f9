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
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/wake"
)

// rulesHoldSQL is the claim's fence on a jobs row: not an approved
// deployment, or one whose environment's rules are still those it was
// let through under (deployregate.go). claimSQL and queuedForRunnerSQL
// share it.
const rulesHoldSQL = `(deploy_state IS DISTINCT FROM 'approved' OR deploy_rules_at IS NOT DISTINCT FROM
           (SELECT e.updated_at FROM environments e WHERE e.project_id = jobs.project_id AND e.name = jobs.environment))`

// membersMaySQL says, of run r, whether every member it is for (its
// actor, the submitter of its snapshot, who retried it) may still start
// it trusted: enabled, and a global admin or a member with the write role
// and the secrets permission (authorStillMay's rule); and that the API
// tokens its snapshot and inputs were given with were not revoked
// (token_revoked, set by the revocation: markRevokedRunsSQL). A member
// removed, disabled or without the permission since the run was made, or
// whoever held a leaked token, would otherwise have their code get the
// secrets, rotated ones too, or an identity token (mayHaveIDToken).
const membersMaySQL = `NOT r.token_revoked AND NOT EXISTS (
    SELECT 1 FROM unnest(ARRAY[r.actor, nullif(r.source_by, r.actor), nullif(r.retried_by, r.actor)]) AS a (who)
    WHERE who LIKE 'user:%' AND NOT EXISTS (
        SELECT 1 FROM users u WHERE u.id = substr(who, 6) AND u.disabled_at IS NULL
          AND (u.role = 'admin' OR EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = r.project_id
                                           AND m.user_id = u.id AND m.role IN ('admin', 'write') AND m.secrets))))`

// authorsMaySQL is, for the claimed job c of a trusted run r, whether its
// tokens were not revoked (a job that names no secrets still runs
// trusted: the runner's own credentials, the trusted caches), and
// membersMaySQL when it names secrets (asked of every job, the members'
// part cost the claim bench about a tenth of its rate).
const authorsMaySQL = `CASE WHEN NOT r.trusted THEN true
            WHEN cardinality(c.secret_names) > 0 THEN (` + membersMaySQL + `)
            ELSE NOT r.token_revoked END`

// claimSQL leases the oldest queued job whose labels the runner covers, in
// one statement: SKIP LOCKED lets concurrent claimers pass each other, the
// generation goes up by one, the lease ID is fresh and random, the expiry
// comes from the database clock, and the run is marked started. The current
// lease lives on the job row; its attempt row is written when it ends
// (finishAttempt), in the transaction that ends it. The scan starts after
// the queue position ($4, $5): see claimHints. Only jobs in the runner's
// scope match: its projects ($6, none meaning all) and, only if it takes
// untrusted work ($7), jobs of untrusted runs, and if it takes untrusted
// work only ($9), no jobs of trusted runs; and only jobs whose runner
// features ($8) the runner declared. That test starts with features = '{}'
// on purpose: a bare second array containment (beside labels) made the
// planner estimate so few matching rows that it left the ordered index
// scan for a sort, and claims fell to a twentieth of their rate
// (forgeci-bench -only claim); a CASE kept the rate but doubled a claim's
// latency on a short queue (-only claim-scale). A job that names secrets
// gets, for a trusted run only, those secrets (sealed) and its project's
// wrapped data key: the project's, and those of the environment it was
// let deploy to, only while its environment's rules are those it was let
// through under (deployregate.go). An attempt starts with no log budget on the fast path:
// its first append takes the slow path, which checks the run's logs
// (appendLogSQL).
const claimSQL = `
WITH candidate AS (
    SELECT id FROM jobs
    WHERE state = 'QUEUED' AND labels <@ $2::text[]
      AND (cardinality($6::text[]) = 0 OR project_id = ANY ($6::text[])) AND (trusted OR $7) AND NOT (trusted AND $9)
      AND (features = '{}'::text[] OR features <@ $8::text[])
      AND ` + rulesHoldSQL + `
      AND (queued_at, id) > ($4::timestamptz, $5::text)
      AND EXISTS (SELECT 1 FROM runners r WHERE r.id = $1 AND r.revoked_at IS NULL FOR SHARE)
    ORDER BY queued_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE jobs j
    SET state = 'RUNNING', runner_id = $1, lease_id = gen_random_uuid(),
        generation = j.generation + 1,
        lease_expires_at = now() + make_interval(secs => $3),
        started_at = now(), log_size = 0, log_limit = 0,
        reason = NULL, exit_code = NULL, outputs = NULL
    FROM candidate c
    WHERE j.id = c.id
    RETURNING j.id, j.run_id, j.generation, j.lease_id, j.lease_expires_at, j.spec, j.queued_at, j.secret_names,
              CASE WHEN j.deploy_state = 'approved' THEN j.environment ELSE '' END AS environment
), run_started AS (
    UPDATE runs SET state = 'RUNNING', started_at = now()
    WHERE id = (SELECT run_id FROM claimed) AND state = 'PENDING'
)
SELECT c.id, c.run_id, c.generation, c.lease_id::text, c.lease_expires_at,
       CASE WHEN r.vars IS NULL OR r.vars = '{}' OR NOT c.spec ? 'run' THEN c.spec
            ELSE jsonb_set(c.spec, '{run,vars}', r.vars) END,
       coalesce(r.source_digest, ''), coalesce(r.manifest_digest, ''), coalesce(r.source_size, 0),
       c.queued_at, r.project_id, r.trusted, c.secret_names,
       CASE WHEN r.trusted AND cardinality(c.secret_names) > 0 THEN
           (SELECT k.wrapped_key FROM project_keys k WHERE k.project_id = r.project_id)
       END,
       CASE WHEN r.trusted AND cardinality(c.secret_names) > 0 THEN
           (SELECT jsonb_agg(jsonb_build_object('Name', s.name, 'Environment', s.environment,
                                                'Sealed', encode(s.sealed, 'base64'), 'Value', s.value))
            FROM project_secrets s WHERE s.project_id = r.project_id AND s.name = ANY (c.secret_names)
                                     AND s.environment IN ('', c.environment))
       END,
       ` + authorsMaySQL + `
FROM claimed c JOIN runs r ON r.id = c.run_id`

// undeliveredReason starts the reason of an attempt whose claim was never
// delivered: it ran nothing, and a retry policy does not count it
// (retryDueSQL). Only the server records ABORTED attempts.
const undeliveredReason = "claim not delivered: "

// abortUndeliveredSQL records the attempt of job $1 whose claim was never
// delivered as ABORTED with reason $2 (see releaseUndelivered).
const abortUndeliveredSQL = `
INSERT INTO job_attempts (job_id, generation, runner_id, lease_id, started_at, ended_at, outcome, reason, log_size)
SELECT id, generation, runner_id, lease_id, started_at, now(), 'ABORTED', $2, 0 FROM jobs WHERE id = $1`

// requeueUndeliveredSQL puts job $1 back in the queue; the next claim's
// generation fences the undelivered lease.
const requeueUndeliveredSQL = `UPDATE jobs SET state = 'QUEUED', queued_at = now() WHERE id = $1`

// touchRunnerSQL records that idle runner $1 polled, at most every ten
// seconds (or when what it says of itself changed), so that idle polling
// writes little: with its version $2, slots $3 and features $4.
const touchRunnerSQL = `
UPDATE runners SET last_seen_at = now(), version = nullif($2, ''), slots = nullif($3, 0), features = $4
WHERE id = $1 AND (last_seen_at IS NULL OR last_seen_at < now() - interval '10 seconds'
                   OR version IS DISTINCT FROM nullif($2, '') OR slots IS DISTINCT FROM nullif($3, 0))`

// Claim is a granted lease as the store returns it: the job object is the
// one stored at run creation, passed through without decoding.
type Claim = protocol.ClaimOf[json.RawMessage]

// Claim leases one job for runner whose labels cover the job's labels. If
// labels is not empty it narrows the runner's registered labels (it may not
// add to them). With wait > 0 it long-polls: it retries the claim until a job
// is found or wait passes, holding no transaction or lock while it waits.
// It returns nil, nil when no job matched.
func (s *Store) Claim(ctx context.Context, runner Runner, labels []string, wait time.Duration) (*Claim, error) {
	effective, err := effectiveLabels(runner, labels)
	if err != nil {
		return nil, err
	}
	if wait < 0 || wait > protocol.MaxClaimWait {
		return nil, domain.Errorf(domain.EInvalid, "wait_seconds must be between 0 and %d", int(protocol.MaxClaimWait.Seconds()))
	}
	deadline := time.Now().Add(wait)
	delay := 50 * time.Millisecond
	first := true
	for {
		c, err := s.claimOnce(ctx, runner, effective, false)
		if err != nil || c != nil {
			return c, err
		}
		if first {
			// An idle runner is polling: record that it is alive. Busy
			// runners are seen through their leases; keeping this write off
			// the claim path keeps claims cheap.
			s.touchRunner(ctx, runner)
			first = false
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
	if err := domain.ValidateLabels(requested); err != nil {
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

// ClaimScan is a short poll's claim (docs/runner-protocol.md "Idle
// polls"): one scan that, when the remembered queue position finds
// nothing, looks from the head, so that the runner, told afterwards that
// nothing was queued since, has missed no job. With no job, settled says
// whether the queue holds none the runner could take: false when the
// scan passed over jobs another transaction held (SKIP LOCKED), which
// may go back to the queue with no new hint; the runner must then look
// again rather than rest on the hint.
func (s *Store) ClaimScan(ctx context.Context, runner Runner, labels []string) (c *Claim, settled bool, err error) {
	effective, err := effectiveLabels(runner, labels)
	if err != nil {
		return nil, false, err
	}
	c, err = s.claimOnce(ctx, runner, effective, true)
	if err != nil || c != nil {
		return c, false, err
	}
	s.touchRunner(ctx, runner)
	var waiting bool
	err = s.pool.QueryRow(ctx, queuedForRunnerSQL, effective, nonNil(runner.Projects), runner.Untrusted,
		nonNil(runner.Features), runner.UntrustedOnly).Scan(&waiting)
	if err != nil {
		return nil, false, fmt.Errorf("claim: %w", err)
	}
	return nil, !waiting, nil
}

// queuedForRunnerSQL asks, without locking, whether a QUEUED job matches
// a runner (claimSQL's conditions).
const queuedForRunnerSQL = `
SELECT EXISTS (SELECT 1 FROM jobs
    WHERE state = 'QUEUED' AND labels <@ $1::text[]
      AND (cardinality($2::text[]) = 0 OR project_id = ANY ($2::text[])) AND (trusted OR $3) AND NOT (trusted AND $5)
      AND (features = '{}'::text[] OR features <@ $4::text[])
      AND ` + rulesHoldSQL + `)`

func (s *Store) claimOnce(ctx context.Context, runner Runner, labels []string, whole bool) (*Claim, error) {
	key := hintKey(labels, runner.Scope, runner.Features)
	at, id, full := s.hints.start(key, s.now())
	c, err := s.claimAfter(ctx, runner, labels, key, at, id)
	if err != nil || c != nil || full || !whole && !s.hints.fullScanDue(key, s.now()) {
		return c, err
	}
	// Nothing after the hint: look behind it too.
	return s.claimAfter(ctx, runner, labels, key, queueStart, "")
}

// claimAfter claims the oldest matching job after the queue position
// (afterAt, afterID).
func (s *Store) claimAfter(ctx context.Context, runner Runner, labels []string, key string,
	afterAt time.Time, afterID string) (*Claim, error) {
	runnerID := runner.ID
	var (
		c           Claim
		expires     time.Time
		queuedAt    time.Time
		projectID   string
		trusted     bool
		authorsMay  bool
		secretNames []string
		wrapped     []byte
		sealed      []sealedSecret
	)
	projects := runner.Projects
	if projects == nil {
		projects = []string{}
	}
	features := runner.Features
	if features == nil {
		features = []string{}
	}
	// A lease is work for the sweeper: noted before it can commit, and
	// the statement must finish while the note covers it, counted from
	// the note (the connection is taken first: a database resuming from
	// a pause takes seconds).
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer conn.Release()
	started, err := s.mark(ctx, conn, false, wake.Sweep)
	if err != nil {
		return nil, err
	}
	qctx, cancel := s.coveredBy(ctx, started)
	defer cancel()
	err = conn.QueryRow(qctx, claimSQL, runnerID, labels, s.limits.LeaseTTL.Seconds(), afterAt, afterID,
		projects, runner.Untrusted, features, runner.UntrustedOnly).Scan(
		&c.Lease.JobID, &c.Lease.RunID, &c.Lease.Generation, &c.Lease.LeaseID, &expires, &c.Job,
		&c.Source.BlobDigest, &c.Source.ManifestDigest, &c.Source.Size, &queuedAt,
		&projectID, &trusted, &secretNames, &wrapped, &sealed, &authorsMay)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		s.afterFailure(ctx, err, wake.Sweep, s.limits.LeaseTTL)
		return nil, fmt.Errorf("claim: %w", err)
	}
	s.hints.claimed(key, queuedAt, c.Lease.JobID)
	c.Lease.RunnerID = runnerID
	c.Lease.ExpiresAt = &expires
	c.LeaseTTLSeconds = int(s.limits.LeaseTTL.Seconds())
	if !authorsMay {
		// Nothing was handed out: the job ends, and the claim goes on to
		// the next (each such job is ended once).
		if err := s.cancelUnauthored(ctx, c.Lease); err != nil {
			return nil, err
		}
		return s.claimAfter(ctx, runner, labels, key, afterAt, afterID)
	}
	if len(secretNames) > 0 {
		if err := s.withSecrets(ctx, &c, projectID, trusted, wrapped, sealed); err != nil {
			// The lease never left this process, so no runner can hold
			// it: the job goes back to the queue, and no code ran.
			s.releaseUndelivered(ctx, c.Lease, err)
			return nil, err
		}
	}
	return &c, nil
}

// withSecrets puts the secrets a job names into its claim: the values of
// its secrets: list in Secrets, ${{ secrets.NAME }} substituted in its env
// and steps, every value in Mask. An untrusted run's job gets none: its
// list is empty and every expression becomes "".
func (s *Store) withSecrets(ctx context.Context, c *Claim, projectID string, trusted bool, wrapped []byte, sealed []sealedSecret) error {
	values := map[string]string{}
	if trusted && len(sealed) > 0 {
		var err error
		if values, err = s.openSecrets(ctx, projectID, wrapped, sealed); err != nil {
			return domain.Errorf(domain.EUnavailable, "the job's secrets cannot be opened now; try again (%v)", err)
		}
	}
	var job domain.ClaimedJob
	if err := json.Unmarshal(c.Job, &job); err != nil {
		return fmt.Errorf("decode job spec: %w", err)
	}
	used := job.ExpandSecrets(values, job.HasFeature(domain.FeatureExpressions))
	for _, name := range job.Secrets {
		if v, ok := values[name]; ok {
			if c.Secrets == nil {
				c.Secrets = map[string]string{}
			}
			c.Secrets[name] = v
			used[name] = v
		}
	}
	for _, v := range used {
		c.Mask = append(c.Mask, v)
	}
	slices.Sort(c.Mask)
	c.Mask = slices.Compact(c.Mask)
	raw, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("encode job spec: %w", err)
	}
	c.Job = raw
	return nil
}

// releaseUndelivered puts a claimed job back in the queue when its claim
// could not be answered (its secrets could not be opened): the attempt is
// recorded as ABORTED with the reason, and the next claim's generation
// fences this one. It writes only while the lease is still exactly this.
func (s *Store) releaseUndelivered(ctx context.Context, l domain.Lease, cause error) {
	_ = s.inTx(ctx, func(tx pgx.Tx) error {
		job, err := lockLease(ctx, tx, l)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, abortUndeliveredSQL, job.ID, undeliveredReason+domain.Truncate(cause.Error(), 150)); err != nil {
			return err
		}
		noteQueued(tx)
		_, err = tx.Exec(ctx, requeueUndeliveredSQL, job.ID)
		return err
	})
	s.signalQueued()
}

// cancelUnauthored ends the just-claimed job, never delivered, of a run
// whose member may no longer start it (authorsMaySQL): CANCELED, with
// the reason, and its run moves on.
func (s *Store) cancelUnauthored(ctx context.Context, l domain.Lease) error {
	var runID string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		job, err := lockLease(ctx, tx, l)
		if err != nil {
			return err
		}
		runID = job.RunID
		_, err = finishAttempt(ctx, tx, job.ID, job.RunID, job.Generation, domain.JobCanceled,
			"canceled: a member this trusted run is for may no longer start trusted runs in its project, "+
				"or an API token its snapshot or inputs were given with was revoked", nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("claim: end a job its run's member may no longer start: %w", err)
	}
	_ = s.afterRun(ctx, runID) // as Complete does
	return nil
}

func (s *Store) touchRunner(ctx context.Context, r Runner) {
	// Best effort: last_seen_at is for humans; a failure must not fail the claim.
	_, _ = s.pool.Exec(ctx, touchRunnerSQL, r.ID, r.Version, r.Slots, nonNil(r.Features))
}
