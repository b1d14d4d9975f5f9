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

// GrantIDToken checks the lease and that the job may have identity
// tokens (its pipeline asks, and its run is trusted), and records the
// token about to be issued, in one transaction. The token expires with
// the lease, in whole seconds, never after it.
func (s *Store) GrantIDToken(ctx context.Context, runnerID, jobID string, l domain.Lease, audience string) (IDTokenGrant, error) {
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
		g.Trusted = true
		if err := tx.QueryRow(ctx, idTokenFactsSQL, job.ID).Scan(&g.Project, &g.Ref, &g.SHA, &g.Event, &g.Environment,
			&g.Expiry, &g.IssuedAt); err != nil {
			return fmt.Errorf("read token facts: %w", err)
		}
		g.IssuedAt, g.Expiry = g.IssuedAt.Truncate(time.Second), g.Expiry.Truncate(time.Second)
		switch {
		case !g.Expiry.After(g.IssuedAt):
			return domain.Errorf(domain.ELeaseExpired, "the lease of job %s expires within a second: heartbeat, then ask again", job.Name)
		case strings.Contains(g.Ref, ":") || strings.Contains(g.Project, ":"):
			// The sub's fields are split on ':' by trust policies.
			return domain.Errorf(domain.EForbidden, "run %s has no ref a token can name", job.RunID)
		}
		g.JTI = uuid.NewString()
		_, err := tx.Exec(ctx, insertIDTokenSQL, g.JTI, job.ID, job.Generation, l.LeaseID, audience, g.Expiry)
		return err
	})
	return g, err
}

// leaseActiveSQL is whether the lease ($1 job, $2 run, $3 runner, $4
// lease ID, $5 generation) is the job's current, unexpired lease of a
// runner not revoked.
const leaseActiveSQL = `
SELECT EXISTS (SELECT 1 FROM jobs j JOIN runners ru ON ru.id = j.runner_id
               WHERE ` + leaseMatchSQL + ` AND ru.revoked_at IS NULL)`

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
