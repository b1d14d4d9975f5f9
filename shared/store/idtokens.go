package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// IDTokenGrant is what an identity token says, as the lease check saw it.
type IDTokenGrant struct {
	JTI                                   string
	Project, Ref, SHA, Event, Environment string
	Trusted                               bool
	IssuedAt, Expiry                      time.Time // the database's now, and the lease's expiry
}

// idTokenFactsSQL reads what a token of job $1 says: its project's name,
// its run's ref, commit and event, the environment it was let deploy to,
// the lease's expiry and the database's now.
const idTokenFactsSQL = `
SELECT p.name, coalesce(r.git_ref, ''), coalesce(r.git_sha, ''), coalesce(j.spec->'run'->>'event_name', ''),
       CASE WHEN j.deploy_state = 'approved' THEN coalesce(j.environment, '') ELSE '' END,
       j.lease_expires_at, now()
FROM jobs j JOIN runs r ON r.id = j.run_id JOIN projects p ON p.id = r.project_id WHERE j.id = $1`

// insertIDTokenSQL records token $1 issued to job $2's lease.
const insertIDTokenSQL = `
INSERT INTO id_tokens (jti, job_id, generation, lease_id, audience, expires_at) VALUES ($1, $2, $3, $4, $5, $6)`

// recentIDTokensSQL counts the tokens of job $1's attempt $2 issued in
// the last minute, and those not yet expired.
const recentIDTokensSQL = `
SELECT count(*) FILTER (WHERE issued_at > now() - interval '1 minute'), count(*) FILTER (WHERE expires_at > now())
FROM id_tokens WHERE job_id = $1 AND generation = $2`

// membersMayTokenSQL asks whether every member run $1 is for may still
// start it trusted (membersMaySQL).
const membersMayTokenSQL = `SELECT ` + membersMaySQL + ` FROM runs r WHERE r.id = $1`

// MaxIDTokensPerMinute bounds the tokens one attempt gets: each costs a
// KMS signature and a row.
const MaxIDTokensPerMinute = 30

// GrantIDToken checks the lease and that the job may have identity
// tokens now (its pipeline asks, its run is trusted, it is not being
// canceled, it had fewer than MaxIDTokensPerMinute in the last minute),
// and reads what the token says. It writes nothing: RecordIDToken
// records the token once it is signed. The token expires with the lease,
// in whole seconds, never after it.
func (s *Store) GrantIDToken(ctx context.Context, runnerID, jobID string, l domain.Lease) (IDTokenGrant, error) {
	var g IDTokenGrant
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		var spec struct {
			IDToken bool `json:"id_token"`
		}
		if err := json.Unmarshal(job.Spec, &spec); err != nil {
			return fmt.Errorf("decode job spec: %w", err)
		}
		switch {
		case !spec.IDToken:
			return domain.Errorf(domain.EForbidden, "job %s does not ask for identity tokens: its pipeline needs permissions: {id-token: write}", job.Name)
		case !job.Trusted:
			return domain.Errorf(domain.EForbidden, "an untrusted run's jobs get no identity tokens")
		}
		if err := mayHaveIDToken(ctx, tx, job); err != nil {
			return err
		}
		g.Trusted = true
		if err := tx.QueryRow(ctx, idTokenFactsSQL, job.ID).Scan(&g.Project, &g.Ref, &g.SHA, &g.Event, &g.Environment,
			&g.Expiry, &g.IssuedAt); err != nil {
			return fmt.Errorf("read token facts: %w", err)
		}
		g.IssuedAt, g.Expiry = g.IssuedAt.Truncate(time.Second), g.Expiry.Truncate(time.Second)
		switch {
		case !g.Expiry.After(g.IssuedAt):
			// Not lease_expired: the lease holds, and a runner hearing
			// that code stops the job.
			return domain.Errorf(domain.EConflict, "the lease of job %s expires within a second: heartbeat, then ask again", job.Name)
		case strings.Contains(g.Ref, ":") || strings.Contains(g.Project, ":"):
			// The sub's fields are split on ':' by trust policies.
			return domain.Errorf(domain.EForbidden, "run %s has no ref a token can name", job.RunID)
		}
		g.JTI = uuid.NewString()
		return nil
	})
	return g, err
}

// mayHaveIDToken refuses a new token to a job being canceled, one whose
// run's members may no longer start it (membersMaySQL), one that
// had MaxIDTokensPerMinute in the last minute, or one that holds
// protocol.MaxLiveIDTokens not yet expired (the runner masks no more in
// its log: with a long lease, an older live token would print in clear). Both the grant and the
// record ask: a cancel may come while the token is signed, and requests
// in parallel all pass the grant's count before any is recorded. Records
// hold the job row FOR UPDATE (withLease), so their counts are exact.
func mayHaveIDToken(ctx context.Context, tx pgx.Tx, job *LeasedJob) error {
	if job.CancelRequested {
		return domain.Errorf(domain.EConflict, "job %s is being canceled: it gets no new identity tokens", job.Name)
	}
	var membersMay bool
	if err := tx.QueryRow(ctx, membersMayTokenSQL, job.RunID).Scan(&membersMay); err != nil {
		return fmt.Errorf("check the run's members: %w", err)
	}
	if !membersMay {
		return domain.Errorf(domain.EForbidden, "job %s gets no identity tokens: a member its run is for may no longer start trusted runs "+
			"in its project, or an API token its snapshot or inputs were given with was revoked", job.Name)
	}
	var recent, live int
	if err := tx.QueryRow(ctx, recentIDTokensSQL, job.ID, job.Generation).Scan(&recent, &live); err != nil {
		return fmt.Errorf("count tokens: %w", err)
	}
	switch {
	case recent >= MaxIDTokensPerMinute:
		return domain.Errorf(domain.ETooLarge, "job %s had %d identity tokens in the last minute, the most an attempt may", job.Name, recent)
	case live >= protocol.MaxLiveIDTokens:
		return domain.Errorf(domain.ETooLarge, "job %s holds %d identity tokens not yet expired, the most an attempt may: "+
			"reuse one until it expires", job.Name, live)
	}
	return nil
}

// RecordIDToken records a signed token, checking the lease, the cancel
// and the count again in the transaction that writes: the token is handed
// out only if this commits, so a lease lost or a cancel asked while it was
// signed gets none, and a token that was never handed out is never
// recorded.
func (s *Store) RecordIDToken(ctx context.Context, runnerID, jobID string, l domain.Lease, g IDTokenGrant, audience string) error {
	return s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if err := mayHaveIDToken(ctx, tx, job); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, insertIDTokenSQL, g.JTI, job.ID, job.Generation, l.LeaseID, audience, g.Expiry)
		return err
	})
}

// leaseActiveSQL is whether the lease ($1 job, $2 run, $3 runner, $4
// lease ID, $5 generation) is the job's current, unexpired lease of a
// runner not revoked, and the job is not being canceled (it is to stop,
// so a deploy target should take nothing more from it).
const leaseActiveSQL = `
SELECT EXISTS (SELECT 1 FROM jobs j JOIN runners ru ON ru.id = j.runner_id JOIN runs r ON r.id = j.run_id
               WHERE ` + leaseMatchSQL + ` AND ru.revoked_at IS NULL
                 AND NOT ` + cancelAskedSQL + `)`

// LeaseActive reports whether l is the current lease of its job, by the
// database's clock.
func (s *Store) LeaseActive(ctx context.Context, l domain.Lease) (bool, error) {
	if l.Validate() != nil {
		return false, nil
	}
	var ok bool
	err := s.pool.QueryRow(ctx, leaseActiveSQL, l.JobID, l.RunID, l.RunnerID, l.LeaseID, l.Generation).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("lease active: %w", err)
	}
	return ok, nil
}
