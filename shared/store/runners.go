package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/wake"
)

// Token prefixes make leaked secrets recognisable to scanners and humans.
const (
	runnerTokenPrefix       = "frt_"
	registrationTokenPrefix = "frg_"
)

// projectByIDOrNameSQL finds project $1 by ID, or else by name.
const projectByIDOrNameSQL = `SELECT id FROM projects WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1`

// insertRegistrationSQL stores a registration token's hash, valid for $4
// seconds by the database clock, with the scope it hands on; $7 is the
// user token it is made with (empty: the operator's call), whose expiry
// it does not outlive (least() passes over a NULL one).
const insertRegistrationSQL = `
INSERT INTO registration_tokens (id, token_hash, description, expires_at, projects, untrusted, created_by_token, untrusted_only)
VALUES ($1, $2, $3, least(now() + make_interval(secs => $4), (SELECT t.expires_at FROM user_tokens t WHERE t.id = nullif($7, ''))),
        $5, $6, nullif($7, ''), $8)
RETURNING expires_at`

// useRegistrationSQL locks the unused, unexpired registration token with
// hash $1 and reads its scope.
const useRegistrationSQL = `
SELECT projects, untrusted, untrusted_only FROM registration_tokens
WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now() FOR UPDATE`

const insertRunnerSQL = `
INSERT INTO runners (id, name, token_hash, labels, projects, untrusted, untrusted_only) VALUES ($1, $2, $3, $4, $5, $6, $7)`

const registrationUsedSQL = `UPDATE registration_tokens SET used_at = now(), used_by_runner = $2 WHERE token_hash = $1`

// authenticateRunnerSQL finds the runner whose token has hash $1.
const authenticateRunnerSQL = `
SELECT id, name, labels, projects, untrusted, untrusted_only, revoked_at IS NOT NULL, encode(token_hash, 'hex')
FROM runners WHERE token_hash = $1`

const revokeRunnerSQL = `UPDATE runners SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING token_hash`

// endRunnerLeasesSQL ends runner $1's leases: their expiry is set in the
// past, after their rows are taken FOR UPDATE (see RevokeRunner).
const endRunnerLeasesSQL = `
UPDATE jobs SET lease_expires_at = 'epoch'
WHERE id IN (SELECT id FROM jobs WHERE runner_id = $1 AND state = 'RUNNING' FOR UPDATE)`

// listRunnersSQL is a page of the runners, newest first, before the
// cursor ($1, $2; empty for the first page), at most $3: the runners
// table alone. What the page's runners do (runnersActivitySQL) is a
// second statement, asked only when the page holds some: on a new
// backend (a cold start's), each table a statement names costs its
// catalogs, 4.5 ms for the four together against 1.2 for this one.
const listRunnersSQL = `
SELECT r.id, r.name, r.labels, r.untrusted, r.untrusted_only, r.created_at, r.last_seen_at, r.revoked_at,
       coalesce(r.version, ''), coalesce(r.slots, 0)
FROM runners r
WHERE $1 = '' OR (r.created_at, r.id) < ($1::timestamptz, $2)
ORDER BY r.created_at DESC, r.id DESC LIMIT $3`

// runnersActivitySQL is, for the runners $1, the names of the projects
// each may serve, whether it runs a job now, and its attempts that ended
// in the last week (counted in one pass: a new backend plans each
// subquery afresh).
const runnersActivitySQL = `
SELECT r.id, coalesce((SELECT array_agg(p.name ORDER BY p.name) FROM projects p WHERE p.id = ANY (r.projects)), '{}'),
       EXISTS (SELECT FROM jobs j WHERE j.runner_id = r.id AND j.state = 'RUNNING'),
       a.failures, a.attempts
FROM runners r,
     LATERAL (SELECT count(*) FILTER (WHERE a.outcome IN ('FAILED', 'ABORTED')) AS failures, count(*) AS attempts
              FROM job_attempts a WHERE a.runner_id = r.id AND a.ended_at > now() - interval '7 days') a
WHERE r.id = ANY ($1)`

// runnersJobsSQL is what the runners $1 run now, oldest first. It is
// asked only when some runner of the page runs a job: on a new backend,
// planning its three tables costs more than the round trip it saves when
// it is a subquery of listRunnersSQL (1.2 ms of 4.9 here).
const runnersJobsSQL = `
SELECT j.runner_id, j.id, j.run_id, j.name, p.name, ru.number
FROM jobs j JOIN runs ru ON ru.id = j.run_id JOIN projects p ON p.id = ru.project_id
WHERE j.runner_id = ANY ($1) AND j.state = 'RUNNING'
ORDER BY j.started_at, j.id`

// Runner is an authenticated runner.
type Runner struct {
	ID     string
	Name   string
	Labels []string
	Scope
	// Features are what the runner declared in this claim it can do
	// (domain.Feature*): a job that needs others is not for it.
	Features []string
	// Version and Slots are what it says of itself in this claim.
	Version string
	Slots   int
}

// Scope is what a runner may run: jobs of these projects (by ID; none
// listed means every project), and untrusted work (pull requests from
// forks, runs of members without the secrets permission) only if
// Untrusted; with UntrustedOnly (which implies Untrusted), no trusted
// work. A registration token hands its scope to the runner.
type Scope struct {
	Projects      []string `json:"projects"`
	Untrusted     bool     `json:"untrusted"`
	UntrustedOnly bool     `json:"untrusted_only,omitempty"`
}

// RunnerInfo is what admins see about a runner.
type RunnerInfo struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	Labels        []string   `json:"labels"`
	ProjectNames  []string   `json:"project_names"` // none: every project
	Untrusted     bool       `json:"untrusted"`
	UntrustedOnly bool       `json:"untrusted_only"`
	CreatedAt     time.Time  `json:"created_at"`
	LastSeenAt    *time.Time `json:"last_seen_at,omitempty"`
	RevokedAt     *time.Time `json:"revoked_at,omitempty"`
	// What it said of itself when it last polled.
	Version string `json:"version,omitempty"`
	Slots   int    `json:"slots,omitempty"`
	// Jobs are those it runs now; Failures and Attempts count its
	// attempts that ended in the last 7 days, failed or aborted and all.
	Jobs     []RunnerJob `json:"jobs"`
	Failures int         `json:"failures_7d"`
	Attempts int         `json:"attempts_7d"`
}

// RunnerJob is a job a runner runs now.
type RunnerJob struct {
	JobID     string `json:"job_id"`
	RunID     string `json:"run_id"`
	Name      string `json:"name"`
	Project   string `json:"project"`
	RunNumber int64  `json:"run_number"`
}

// newSecret returns a random token with the given prefix: 32 random bytes.
func newSecret(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG failing is not recoverable
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// CreateRegistrationToken makes a one-time token that registers one runner
// within ttl. The token is returned once and stored only as a hash.
// The runner it registers serves scope; projects are named by name or ID
// and must exist. It is the operator's call; people go through
// CreateRegistrationTokenAs.
func (s *Store) CreateRegistrationToken(ctx context.Context, ttl time.Duration, description string, scope Scope) (string, time.Time, error) {
	return s.createRegistrationToken(ctx, nil, "", ttl, description, scope)
}

// CreateRegistrationTokenAs makes a registration token on behalf of by,
// who must be a global admin. Revoking the API token by used expires it
// while unused (revokeTree).
func (s *Store) CreateRegistrationTokenAs(ctx context.Context, by User, ttl time.Duration, description string, scope Scope) (string, time.Time, error) {
	return s.createRegistrationToken(ctx, byAdmin(by), by.TokenID, ttl, description, scope)
}

func (s *Store) createRegistrationToken(ctx context.Context, may check, madeWith string, ttl time.Duration, description string, scope Scope) (string, time.Time, error) {
	if ttl <= 0 || ttl > 30*24*time.Hour {
		return "", time.Time{}, domain.Errorf(domain.EInvalid, "registration token lifetime must be between 1s and 30 days")
	}
	if len(scope.Projects) > 100 {
		return "", time.Time{}, domain.Errorf(domain.EInvalid, "a runner may be scoped to at most 100 projects")
	}
	tok := newSecret(registrationTokenPrefix)
	var expires time.Time
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := may.run(ctx, tx); err != nil {
			return err
		}
		if err := holdLiveToken(ctx, tx, madeWith); err != nil {
			return err
		}
		ids := []string{}
		for _, p := range scope.Projects {
			var id string
			err := tx.QueryRow(ctx, projectByIDOrNameSQL, p).Scan(&id)
			if errors.Is(err, pgx.ErrNoRows) {
				return domain.Errorf(domain.EInvalid, "project %q does not exist", p)
			}
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return tx.QueryRow(ctx, insertRegistrationSQL, uuid.Must(uuid.NewV7()).String(), hashSecret(tok), description,
			ttl.Seconds(), ids, scope.Untrusted || scope.UntrustedOnly, madeWith, scope.UntrustedOnly).Scan(&expires)
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return tok, expires, nil
}

// RegisterRunner consumes a registration token and creates a runner. A
// wrong, used or expired token is EUnauthorized and creates nothing.
func (s *Store) RegisterRunner(ctx context.Context, registrationToken, name string, labels []string) (runnerID, token string, err error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return "", "", domain.Errorf(domain.EInvalid, "field name is required (1 to 200 characters)")
	}
	if labels == nil {
		labels = []string{}
	}
	if err := domain.ValidateLabels(labels); err != nil {
		return "", "", err
	}
	if !strings.HasPrefix(registrationToken, registrationTokenPrefix) {
		return "", "", domain.Errorf(domain.EUnauthorized, "registration token is not valid")
	}
	runnerID = uuid.Must(uuid.NewV7()).String()
	token = newSecret(runnerTokenPrefix)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		// The token's use and the runner commit together or not at all;
		// the runner takes the token's scope.
		var scope Scope
		err := tx.QueryRow(ctx, useRegistrationSQL, hashSecret(registrationToken)).Scan(&scope.Projects, &scope.Untrusted, &scope.UntrustedOnly)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.EUnauthorized, "registration token is unknown, used or expired")
		}
		if err != nil {
			return fmt.Errorf("use registration token: %w", err)
		}
		if _, err := tx.Exec(ctx, insertRunnerSQL, runnerID, name, hashSecret(token), labels, scope.Projects, scope.Untrusted,
			scope.UntrustedOnly); err != nil {
			return fmt.Errorf("insert runner: %w", err)
		}
		_, err = tx.Exec(ctx, registrationUsedSQL, hashSecret(registrationToken), runnerID)
		return err
	})
	if err != nil {
		return "", "", err
	}
	return runnerID, token, nil
}

// AuthenticateRunner maps a bearer token to its runner. Unknown or revoked
// tokens are EUnauthorized.
func (s *Store) AuthenticateRunner(ctx context.Context, token string) (Runner, error) {
	var r Runner
	var revoked bool
	found, err := s.lookupToken(ctx, token, runnerTokenPrefix, authenticateRunnerSQL, &r.ID, &r.Name, &r.Labels, &r.Projects, &r.Untrusted, &r.UntrustedOnly, &revoked)
	if err != nil {
		return Runner{}, fmt.Errorf("authenticate runner: %w", err)
	}
	if !found || revoked {
		return Runner{}, domain.Errorf(domain.EUnauthorized, "runner token is missing, unknown or revoked")
	}
	return r, nil
}

// lookupToken finds a bearer token by its hash: query's row scans into dest
// and then the stored hash, in hex. found is false for a token without
// prefix, an overlong one, an unknown one or one whose hash differs; the
// lookup is by hash, so its timing depends on the hash, not on the secret,
// and the final compare is constant time anyway.
func (s *Store) lookupToken(ctx context.Context, token, prefix, query string, dest ...any) (found bool, err error) {
	return s.lookupTokenWith(ctx, token, prefix, query, nil, dest...)
}

// lookupTokenWith is lookupToken with more arguments for query ($2 on).
//
// A lookup is the first statement of most cold starts, so it goes in exec
// mode: one round trip and one parse, where pgx's describe adds a round
// trip and a parse on a new connection. Exec mode reads results as text,
// which is why the stored hash comes back in hex: bytea's text form
// depends on the server's bytea_output. The server infers each
// argument's type from the statement (pgx sends none, and encodes each as
// its Go type): the hash compared with a bytea column, the numbers given
// to a function of one type. A new argument elsewhere needs a cast
// ($n::bytea).
func (s *Store) lookupTokenWith(ctx context.Context, token, prefix, query string, args []any, dest ...any) (found bool, err error) {
	if !strings.HasPrefix(token, prefix) || len(token) > 200 {
		return false, nil
	}
	want := hashSecret(token)
	var got string
	err = s.pool.QueryRow(ctx, query, append([]any{pgx.QueryExecModeExec, want}, args...)...).Scan(append(dest, &got)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(hex.EncodeToString(want))) == 1, nil
}

// RevokeRunner revokes a runner: every later request with its token gets 401,
// and its leases end at once (their expiry is set in the past, and the
// sweeper is noted after the commit to look now), so the sweeper records
// its running jobs as ABORTED like any lost lease, and a retry policy may
// run them elsewhere. The job rows are taken FOR UPDATE first, as by every
// transition that ends a lease: a fast-path write in flight either
// commits before the revocation or sees its lease ended. That is why the
// fast paths' lease check need not read the runner's row.
//
// Its idle polls' verdict (package wake) is deleted in the transaction and
// again after the commit, in case a poll wrote one meanwhile (that poll
// also checks the runner again after writing). The revocation commits
// whatever S3 does (the first deletion waits a few seconds at most; the
// second's failure is the error returned). A claim takes the runner's row
// FOR SHARE, so a revocation waits for claims in flight and then ends
// their leases.
//
// It is the operator's call; people go through RevokeRunnerAs.
func (s *Store) RevokeRunner(ctx context.Context, runnerID string) error {
	return s.revokeRunner(ctx, nil, runnerID)
}

// RevokeRunnerAs revokes a runner on behalf of by, who must be a global
// admin.
func (s *Store) RevokeRunnerAs(ctx context.Context, by User, runnerID string) error {
	return s.revokeRunner(ctx, byAdmin(by), runnerID)
}

func (s *Store) revokeRunner(ctx context.Context, may check, runnerID string) error {
	// Not inTx: nothing here must be noted before the commit (no job
	// changes state; the leases' old expiry is noted already), so that a
	// runner can be revoked while S3 fails.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if err := may.run(ctx, tx); err != nil {
		return err
	}
	var hash []byte
	err = tx.QueryRow(ctx, revokeRunnerSQL, runnerID).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Errorf(domain.ENotFound, "runner %s not found", runnerID)
	}
	if err != nil {
		return fmt.Errorf("revoke runner: %w", err)
	}
	tag, err := tx.Exec(ctx, endRunnerLeasesSQL, runnerID)
	if err != nil {
		return fmt.Errorf("end the revoked runner's leases: %w", err)
	}
	_ = s.dropVerdict(ctx, hash) // again below; a failure here does not stop the revocation
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if tag.RowsAffected() > 0 && s.board != nil {
		// The sweeper is noted for the leases' old expiry (up to their
		// TTL on): it should look now, to record the jobs ABORTED (or
		// retry them). Lost, it looks then.
		_ = s.board.Due(ctx, wake.Sweep, s.board.Now())
	}
	return s.dropVerdict(ctx, hash)
}

func (s *Store) dropVerdict(ctx context.Context, hash []byte) error {
	if s.board == nil {
		return nil
	}
	if err := s.board.DropVerdict(ctx, hash); err != nil {
		return domain.Errorf(domain.EUnavailable, "the runner is revoked (no job, 401 on every other route), but its "+
			"idle-poll verdict could not be deleted, so its idle polls may get 204 for up to 24 hours: revoke again to retry (%v)", err)
	}
	return nil
}

// ListRunners returns a page of the runners, newest first: the runners
// (listRunnersSQL), then what they do (runnersActivitySQL), then the jobs
// of those that run some (runnersJobsSQL), each statement asked only when
// the one before found something. All go in pgx's exec mode (one round
// trip each, no describe first): their arguments are text, numbers and
// text arrays, and their results come back as text, which pgx reads for
// times only in PostgreSQL's default DateStyle, ISO (pinned: OpenPool,
// template.yaml).
func (s *Store) ListRunners(ctx context.Context, pg Page) ([]RunnerInfo, string, error) {
	limit, after, err := pg.parseTimed(2, 0) // created_at, id
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, listRunnersSQL, pgx.QueryExecModeExec, after[0], after[1], limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list runners: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunnerInfo, error) {
		r := RunnerInfo{ProjectNames: []string{}, Jobs: []RunnerJob{}}
		err := row.Scan(&r.ID, &r.Name, &r.Labels, &r.Untrusted, &r.UntrustedOnly, &r.CreatedAt, &r.LastSeenAt, &r.RevokedAt,
			&r.Version, &r.Slots)
		return r, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("list runners: %w", err)
	}
	rs, next := trim(rs, limit, func(r RunnerInfo) []string { return []string{r.CreatedAt.Format(time.RFC3339Nano), r.ID} })
	if len(rs) == 0 {
		return rs, next, nil
	}
	busy, err := s.addRunnersActivity(ctx, rs)
	if err != nil || len(busy) == 0 {
		return rs, next, err
	}
	return rs, next, s.addRunnersJobs(ctx, rs, busy)
}

// addRunnersActivity fills in the projects, the week's attempts and
// whether each runner of rs runs a job, and returns those that do.
func (s *Store) addRunnersActivity(ctx context.Context, rs []RunnerInfo) (busy []string, err error) {
	ids := make([]string, len(rs))
	at := make(map[string]*RunnerInfo, len(rs))
	for i := range rs {
		ids[i], at[rs[i].ID] = rs[i].ID, &rs[i]
	}
	rows, err := s.pool.Query(ctx, runnersActivitySQL, pgx.QueryExecModeExec, ids)
	if err != nil {
		return nil, fmt.Errorf("list runners' activity: %w", err)
	}
	var id string
	var names []string
	var runs bool
	var failures, attempts int
	_, err = pgx.ForEachRow(rows, []any{&id, &names, &runs, &failures, &attempts}, func() error {
		if r := at[id]; r != nil {
			r.ProjectNames, r.Failures, r.Attempts = names, failures, attempts
			if runs {
				busy = append(busy, id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list runners' activity: %w", err)
	}
	return busy, nil
}

// addRunnersJobs fills in the jobs the runners busy (of rs) run now, as
// of this second statement: a busy runner shows the jobs it runs by
// then, and a runner that was idle at the first shows none.
func (s *Store) addRunnersJobs(ctx context.Context, rs []RunnerInfo, busy []string) error {
	rows, err := s.pool.Query(ctx, runnersJobsSQL, pgx.QueryExecModeExec, busy)
	if err != nil {
		return fmt.Errorf("list runners' jobs: %w", err)
	}
	byRunner := map[string][]RunnerJob{}
	var runner string
	var j RunnerJob
	_, err = pgx.ForEachRow(rows, []any{&runner, &j.JobID, &j.RunID, &j.Name, &j.Project, &j.RunNumber}, func() error {
		byRunner[runner] = append(byRunner[runner], j)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list runners' jobs: %w", err)
	}
	for i := range rs {
		if js := byRunner[rs[i].ID]; js != nil {
			rs[i].Jobs = js
		}
	}
	return nil
}
