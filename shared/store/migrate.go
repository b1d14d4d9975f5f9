package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/forgeci/forgeci/migrations"
	"github.com/forgeci/forgeci/shared/secretbox"
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
// the migrate function call it on every deploy.
func MigrateAndSeal(ctx context.Context, url string, log *slog.Logger, k secretbox.Keyring) (applied, sealed int, err error) {
	if applied, err = Migrate(ctx, url, log); err != nil {
		return applied, 0, err
	}
	pool, err := OpenPool(ctx, url, PoolOptions{MaxConns: 1, NoStatementCache: true, NoStartupSettings: true})
	if err != nil {
		return applied, 0, err
	}
	defer pool.Close()
	st := New(pool, Limits{})
	if k != nil {
		st.SetKeyring(k)
	}
	sealed, err = st.SealLegacySecrets(ctx)
	return applied, sealed, err
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
