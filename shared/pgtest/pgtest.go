// Package pgtest gives each test a fresh, migrated PostgreSQL database,
// cloned from a template database that is migrated once per schema version.
//
// The server comes from FORGECI_TEST_PG (an admin URL, set by `make test`);
// without it, the first test of the binary starts its own throwaway cluster.
// Tests run against real PostgreSQL, never a mock.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/migrations"
	"github.com/forgeci/forgeci/shared/pglocal"
	"github.com/forgeci/forgeci/shared/schema"
	"github.com/forgeci/forgeci/shared/store"
)

var (
	once     sync.Once
	adminURL string
	startErr error
	cluster  *pglocal.Cluster
)

// AdminURL returns the URL of the test server's "postgres" database.
func AdminURL(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if u := os.Getenv("FORGECI_TEST_PG"); u != "" {
			adminURL = u
			return
		}
		cluster, startErr = pglocal.Start(context.Background(), pglocal.Options{Fast: true})
		if startErr == nil {
			adminURL = cluster.URL
		}
	})
	if startErr != nil {
		t.Fatalf("start PostgreSQL for tests: %v", startErr)
	}
	return adminURL
}

// Cluster returns the cluster this binary started, or nil when the server
// came from FORGECI_TEST_PG (tests that restart PostgreSQL need their own).
func Cluster() *pglocal.Cluster { return cluster }

// NewDatabase creates a fresh migrated database and returns its URL. It is
// dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin := AdminURL(t)
	tmpl, err := template(ctx, admin)
	if err != nil {
		t.Fatalf("template database: %v", err)
	}
	name := "t_" + strings.ReplaceAll(randomName(), "-", "")
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect admin: %v", err)
	}
	defer conn.Close(ctx)
	// CREATE DATABASE ... TEMPLATE fails if someone is connected to the
	// template at that instant (another package building it); retry briefly.
	for i := 0; ; i++ {
		_, err = conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, tmpl))
		if err == nil || i == 50 || !strings.Contains(err.Error(), "being accessed by other users") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	url := replaceDB(admin, name)
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name))
	})
	return url
}

// EmptyDatabase creates an empty database named name, without the
// migrations (for tests of migrating), and returns its URL. One left by an
// earlier run is dropped first; this one is dropped when the test ends.
func EmptyDatabase(t testing.TB, name string) string {
	t.Helper()
	ctx := context.Background()
	admin := AdminURL(t)
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	drop := `DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`
	if err := exec(drop); err != nil {
		t.Fatal(err)
	}
	if err := exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec(drop) })
	return replaceDB(admin, name)
}

// NewPool returns a pool on a fresh database, closed when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := store.OpenPool(context.Background(), NewDatabase(t), store.PoolOptions{MaxConns: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewStore returns a Store on a fresh database.
func NewStore(t testing.TB, limits store.Limits) *store.Store {
	t.Helper()
	return store.New(NewPool(t), limits)
}

// template makes sure the template database of the current migrations
// exists, building it under an advisory lock, and returns its name.
func template(ctx context.Context, admin string) (string, error) {
	name := "forgeci_tmpl_" + migrationsHash()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(7413)`); err != nil {
		return "", err
	}
	defer conn.Exec(ctx, `SELECT pg_advisory_unlock(7413)`) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+building+` WITH (FORCE)`)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+building); err != nil {
		return "", err
	}
	if _, err := schema.Migrate(ctx, replaceDB(admin, building), nil); err != nil {
		return "", err
	}
	// Renamed only when complete, so a half-built template is never used.
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+building+` RENAME TO `+name); err != nil {
		return "", err
	}
	return name, nil
}

func migrationsHash() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(migrations.FS, path)
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func replaceDB(url, db string) string {
	i := strings.LastIndex(url, "/")
	rest := ""
	if q := strings.Index(url[i:], "?"); q >= 0 {
		rest = url[i+q:]
	}
	return url[:i+1] + db + rest
}

func randomName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Project creates a project (runs are only made in projects that exist).
func Project(t testing.TB, st *store.Store, name string) store.Project {
	t.Helper()
	p, err := st.CreateProject(context.Background(), name, "main")
	if err != nil {
		t.Fatalf("create project %s: %v", name, err)
	}
	return p
}

// Admin creates a global admin user (for tests of what people do).
func Admin(t testing.TB, st *store.Store, name string) store.User {
	t.Helper()
	u, _, err := st.CreateUser(context.Background(), name, store.RoleAdmin)
	if err != nil {
		t.Fatalf("create admin %s: %v", name, err)
	}
	return u
}

// SessionCookie opens a dashboard session with an API token, as signing in
// does, and returns its cookie. A token the store refuses goes into the
// cookie as it is: the dashboard refuses it just the same.
func SessionCookie(t testing.TB, st *store.Store, token string) *http.Cookie {
	t.Helper()
	c := &http.Cookie{Name: "forgeci_session", Value: token}
	if session, _, err := st.OpenSession(context.Background(), token); err == nil {
		c.Value = session
	}
	return c
}
