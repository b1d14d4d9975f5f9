// Package store holds every SQL statement ForgeCI runs. PostgreSQL is the
// serialization point of the system: claims, lease checks and terminal
// transitions are conditional statements here, and lease time is always the
// database's now(), never the caller's clock.
//
// One file, or a few named after it, per aggregate: users.go (users and
// their tokens); projects.go and authz.go (projects, members, access);
// runs.go, runs_advance.go and runs_sql.go (runs: creation, retry,
// cancel, approval, the run's state machine); jobs.go, lease.go,
// claim.go, claimhint.go, logs.go, compact.go and sweep.go (jobs and
// their leases: claim, heartbeat, log append, completion, expiry);
// artifacts.go, blobs.go, gc.go and gcplan.go (artifacts, caches, blobs,
// uploads and the collector); repositories.go, deliveries.go and
// checks.go (GitHub); secrets.go; runners.go. Every statement is a named
// constant near the top of the file that runs it (the runs' in
// runs_sql.go). Fragments shared by several statements (leaseMatchSQL,
// logEndSQL, runColumns, projectColumns, unreferencedSQL) are joined to
// them at compile time, never at run time.
//
// Public methods own their transaction; lowercase helpers take a pgx.Tx.
// Methods return *domain.Error for anything a client may be told; every other
// error is internal.
package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/wake"
)

// Limits the store enforces. Zero values are replaced by the defaults.
type Limits struct {
	// LeaseTTL is how long a claim or heartbeat keeps a lease alive.
	LeaseTTL time.Duration
	// MaxLogBytes is the largest log one attempt may write.
	MaxLogBytes int64
	// MaxRunLogBytes bounds the logs of one run's jobs together, and
	// MaxRunArtifactBytes their artifacts.
	MaxRunLogBytes      int64
	MaxRunArtifactBytes int64
}

// Defaults used when a Limits field is zero.
const (
	DefaultLeaseTTL            = 60 * time.Second
	DefaultMaxLogBytes         = 64 << 20
	DefaultMaxRunLogBytes      = 1 << 30
	DefaultMaxRunArtifactBytes = 20 << 30
)

// Store is the database behind the control plane.
type Store struct {
	pool   *pool
	limits Limits

	// queuedCh is closed (and replaced) whenever this process queues jobs,
	// waking its long-polling claims early. Other processes find the jobs
	// on their next poll.
	mu       sync.Mutex
	queuedCh chan struct{}

	// hints are where claims start scanning the queue (claimhint.go).
	hints claimHints

	// keyring seals and opens project secrets (nil: not configured);
	// dataKeys caches the project data keys it unwrapped.
	keyring  secretbox.Keyring
	dataKeys *secretbox.Cache

	// objects is the CAS, for checking bytes at registration and deleting
	// what the collector frees (nil: not configured).
	objects Objects

	// board holds the wake-up hints (wake.go; nil: none); scm says
	// writes note the GitHub worker's work too.
	board *wake.Board
	scm   bool

	// now is the process's clock, for what the store decides in Go: when
	// a claim scans the queue from its head (claimhint.go). Leases and
	// every other expiry are decided by the database's now().
	now func() time.Time
}

// New wraps an open pool.
func New(p *pgxpool.Pool, limits Limits) *Store {
	if limits.LeaseTTL <= 0 {
		limits.LeaseTTL = DefaultLeaseTTL
	}
	if limits.MaxLogBytes <= 0 {
		limits.MaxLogBytes = DefaultMaxLogBytes
	}
	if limits.MaxRunLogBytes <= 0 {
		limits.MaxRunLogBytes = max(DefaultMaxRunLogBytes, limits.MaxLogBytes)
	}
	if limits.MaxRunArtifactBytes <= 0 {
		limits.MaxRunArtifactBytes = DefaultMaxRunArtifactBytes
	}
	return &Store{pool: &pool{pgx: p}, limits: limits, queuedCh: make(chan struct{}), now: time.Now}
}

// SetClock replaces the process clock the store reads (tests; see the now
// field). Lease expiry does not read it: tests move a lease's expiry in
// the database instead.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// Queued is closed when this process next queues jobs (idle polls held
// open wake on it).
func (s *Store) Queued() <-chan struct{} { return s.queued() }

func (s *Store) queued() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queuedCh
}

func (s *Store) signalQueued() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.queuedCh)
	s.queuedCh = make(chan struct{})
}

// Limits returns the limits in force.
func (s *Store) Limits() Limits { return s.limits }

// Pool returns the underlying pool (for tests and benchmarks).
func (s *Store) Pool() *pgxpool.Pool { return s.pool.pgx }

// PoolOptions shape a connection pool for where it runs.
type PoolOptions struct {
	// MaxConns caps the pool. A Lambda container serves one request at a
	// time, so 2 is plenty there; RDS Proxy multiplexes the rest.
	MaxConns int32
	// NoStatementCache makes pgx use unnamed statements only, so that RDS
	// Proxy never pins a client session to one database connection. pgx
	// still caches each statement's parameter and result types (described
	// once per connection through an unnamed statement), so arguments are
	// encoded for their column types: QueryExecModeExec would send a []byte
	// for a jsonb column as bytea, and PostgreSQL refuses it.
	NoStatementCache bool
	// NoStartupSettings sends no server settings in the startup message
	// (application_name only): RDS Proxy refuses connections that carry
	// parameters it does not know. The server's parameter group sets
	// plan_cache_mode and DateStyle instead (template.yaml).
	NoStartupSettings bool
	// IdleClose closes a connection idle this long (checked every second
	// while the process runs): an idle stack holds no connection, so a
	// database that pauses when none is held (Aurora) can pause.
	IdleClose time.Duration
	// Lazy opens no connection until the first query: a cold start that
	// needs none (an idle poll, a pass with nothing due) makes none.
	Lazy bool
	// Configure, when set, adjusts the parsed configuration (IAM database
	// authentication: a token per connection, the RDS authorities).
	Configure func(*pgxpool.Config) error
	// PreDialed, when set, is the TCP connection the pool's first
	// connection takes (PreDial).
	PreDialed *PreDialed
}

// ConnectTimeout bounds opening one connection, unless the URL sets
// connect_timeout.
const ConnectTimeout = 25 * time.Second

// OpenPool connects to PostgreSQL and checks the connection.
func OpenPool(ctx context.Context, url string, opts PoolOptions) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, url, opts)
	if err != nil {
		opts.PreDialed.Release() // a pool not opened takes nothing
	}
	return pool, err
}

func openPool(ctx context.Context, url string, opts PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.NoStatementCache {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "forgeci"
	// Every query here is a short OLTP statement whose best plan does not
	// depend on its parameters. Without this, PostgreSQL keeps re-planning
	// the claim (its generic estimate for "labels <@ $2" looks worse than
	// the custom plans), which doubled the cost of every claim.
	if !opts.NoStartupSettings {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
		// Statements in exec mode get their times back as text, which
		// pgx reads in this DateStyle only (PostgreSQL's default).
		cfg.ConnConfig.RuntimeParams["DateStyle"] = "ISO, MDY"
	}
	if opts.Configure != nil {
		if err := opts.Configure(cfg); err != nil {
			return nil, fmt.Errorf("database connection: %w", err)
		}
	}
	// A connection that does not come up in this long (Aurora resuming from
	// a pause takes about 15 s) fails, rather than waiting on whatever
	// context its first caller had.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	if opts.PreDialed != nil {
		cfg.ConnConfig.LookupFunc = opts.PreDialed.lookupFunc(cfg.ConnConfig.LookupFunc)
		cfg.ConnConfig.DialFunc = opts.PreDialed.dialFunc(cfg.ConnConfig.DialFunc)
	}
	if opts.IdleClose > 0 {
		cfg.MaxConnIdleTime = opts.IdleClose
		cfg.HealthCheckPeriod = time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if opts.Lazy {
		return pool, nil
	}
	// The first connection is opened now, and kept: its startup's last
	// answer (ReadyForQuery) shows the server ready, so no ping follows
	// (a round trip more on the cold start of the migrate function).
	pctx, cancel := context.WithTimeout(ctx, ConnectTimeout+5*time.Second)
	defer cancel()
	c, err := pool.Acquire(pctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	c.Release()
	return pool, nil
}

// inTx runs fn in a transaction, committing when fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	nt := &noteTx{Tx: tx}
	if err := fn(nt); err != nil {
		return err
	}
	if err := s.commitMarked(ctx, nt); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// inTxValue is inTx for a transaction that answers a value: fn's value
// once the transaction commits, else T's zero value and the error.
func inTxValue[T any](ctx context.Context, s *Store, fn func(tx pgx.Tx) (T, error)) (T, error) {
	var v T
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		v, err = fn(tx)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// queryIDs runs query in tx and returns its rows' one text column.
func queryIDs(ctx context.Context, tx pgx.Tx, query string, args ...any) ([]string, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// isUniqueViolation reports whether err is a unique-constraint violation.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
