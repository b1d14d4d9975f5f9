// Package schema applies the database's migrations (the embedded SQL of
// package migrations, with goose). It is apart from package store so that
// goose and database/sql stay out of the functions that only query.
package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/forgeci/forgeci/migrations"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
)

// migrationLockID is the PostgreSQL advisory lock key goose holds while it
// migrates, so that concurrent cold starts or CLI runs apply each migration
// exactly once. ("forgeci" in ASCII.)
const migrationLockID int64 = 0x666f7267656369

// Migrate applies every pending migration. It is idempotent: run it as often
// as you like, from as many processes as you like.
func Migrate(ctx context.Context, url string, log *slog.Logger) (applied int, err error) {
	cfg, err := stdlibConfig(url)
	if err != nil {
		return 0, err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return migrateDB(ctx, db, log)
}

// MigrateAndSeal applies every pending migration, then seals the project
// secrets an installation from before sealed secrets still holds in plain
// text, with k (nil will do when there are none). The migrate command and
// the migrate function call it on every deploy. When every migration is
// applied already (most deploys) it asks one question on one connection
// instead of running goose, which opens its own and takes a lock.
func MigrateAndSeal(ctx context.Context, url string, log *slog.Logger, k secretbox.Keyring) (applied, sealed int, err error) {
	pool, err := OpenPool(ctx, url, nil)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	return MigrateAndSealWith(ctx, pool, url, log, k)
}

// OpenPool opens and checks the one connection MigrateAndSealWith asks
// on, over pre's connection when it is not nil (store.PreDial).
func OpenPool(ctx context.Context, url string, pre *store.PreDialed) (*pgxpool.Pool, error) {
	return store.OpenPool(ctx, url, store.PoolOptions{MaxConns: 1, NoStatementCache: true, NoStartupSettings: true,
		PreDialed: pre})
}

// MigrateAndSealWith is MigrateAndSeal on a pool of url opened already
// (OpenPool), which it leaves open.
func MigrateAndSealWith(ctx context.Context, pool *pgxpool.Pool, url string, log *slog.Logger, k secretbox.Keyring) (applied, sealed int, err error) {
	current, legacy, err := upToDate(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	if current && !legacy {
		return 0, 0, nil // one statement for the deploy of a release with no new migration
	}
	if !current {
		if applied, err = Migrate(ctx, url, log); err != nil {
			return applied, 0, err
		}
	}
	st := store.New(pool, store.Limits{})
	if k != nil {
		st.SetKeyring(k)
	}
	sealed, err = st.SealLegacySecrets(ctx)
	return applied, sealed, err
}

// appliedSQL counts the versions $1 whose latest record in goose's table
// says applied, and says whether secrets are left to seal.
const appliedSQL = `
SELECT count(*), ` + store.LegacySecretsSQL + `
FROM (SELECT DISTINCT ON (version_id) version_id, is_applied FROM goose_db_version
      WHERE version_id = ANY ($1) ORDER BY version_id, id DESC) v
WHERE is_applied`

// upToDate says whether every embedded migration is applied (no goose
// table yet, or no secrets table: no), and whether secrets are left to
// seal.
func upToDate(ctx context.Context, pool *pgxpool.Pool) (current, legacy bool, err error) {
	versions, err := migrationVersions()
	if err != nil {
		return false, false, err
	}
	// In exec mode: one round trip and one parse on the new connection
	// of a migrate function's cold start, where describing first takes
	// two of each. The versions go as text; the server reads them as
	// bigint[] from the comparison.
	var n int
	err = pool.QueryRow(ctx, appliedSQL, pgx.QueryExecModeExec, versions).Scan(&n, &legacy)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("migrations: %w", err)
	}
	return n == len(versions), legacy, nil
}

// migrationVersions are the versions of the embedded migrations (the
// number each file name starts with, as goose reads it).
func migrationVersions() ([]int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, n := range names {
		digits, _, _ := strings.Cut(n, "_")
		v, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version: %w", n, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// MigrateTo applies the migrations up to and including version (tests of
// upgrades from an older schema).
func MigrateTo(ctx context.Context, url string, version int64) error {
	cfg, err := stdlibConfig(url)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	_, err = p.UpTo(ctx, version)
	return err
}

func migrateDB(ctx context.Context, db *sql.DB, log *slog.Logger) (int, error) {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID))
	if err != nil {
		return 0, fmt.Errorf("migration lock: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker)}
	if log != nil {
		opts = append(opts, goose.WithSlog(log))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, opts...)
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("migrate: %w", err)
	}
	return len(res), nil
}

func stdlibConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	return cfg, nil
}
