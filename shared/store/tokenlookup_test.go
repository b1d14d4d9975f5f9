package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestTokenLookupsInOtherServerSettings: token lookups read their results
// as text (exec mode), so each is run on a database whose settings change
// text forms (bytea_output escape, DateStyle SQL, DMY), through a pool
// that sends no startup settings (as the functions' behind RDS Proxy):
// each finds its token, a token one character off is refused, and the
// runner's labels and projects read back whole.
func TestTokenLookupsInOtherServerSettings(t *testing.T) {
	ctx := context.Background()
	url := databaseWith(t, "bytea_output = 'escape'", "DateStyle = 'SQL, DMY'")
	pool, err := store.OpenPool(ctx, url, store.PoolOptions{MaxConns: 2, NoStatementCache: true, NoStartupSettings: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var output string
	if err := pool.QueryRow(ctx, `SHOW bytea_output`).Scan(&output); err != nil || output != "escape" {
		t.Fatalf("bytea_output %q, %v", output, err)
	}
	s := store.New(pool, store.Limits{})

	p, err := s.CreateProject(ctx, "p", "main")
	if err != nil {
		t.Fatal(err)
	}
	project := p.ID
	reg, _, err := s.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Projects: []string{project}})
	if err != nil {
		t.Fatal(err)
	}
	id, runnerToken, err := s.RegisterRunner(ctx, reg, "r", []string{"linux", "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.AuthenticateRunner(ctx, runnerToken)
	if err != nil || r.ID != id || strings.Join(r.Labels, ",") != "linux,arm64" || strings.Join(r.Projects, ",") != project {
		t.Fatalf("runner %+v, %v", r, err)
	}

	admin, userToken, err := s.CreateUser(ctx, "root", "admin")
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.AuthenticateUser(ctx, userToken)
	if err != nil || u.ID != admin.ID || u.Name != "root" || u.Role != "admin" {
		t.Fatalf("user %+v, %v", u, err)
	}
	secret, su, err := s.OpenSession(ctx, userToken)
	if err != nil || su.ID != admin.ID {
		t.Fatalf("session for %+v, %v", su, err)
	}
	su, err = s.AuthenticateSession(ctx, secret)
	if err != nil || su.ID != admin.ID || su.TokenID != u.TokenID {
		t.Fatalf("session user %+v, %v", su, err)
	}

	for name, check := range map[string]func(string) error{
		runnerToken: func(tok string) error { _, err := s.AuthenticateRunner(ctx, tok); return err },
		userToken:   func(tok string) error { _, err := s.AuthenticateUser(ctx, tok); return err },
		secret:      func(tok string) error { _, err := s.AuthenticateSession(ctx, tok); return err },
	} {
		off := name[:len(name)-1] + string(name[len(name)-1]^1)
		if err := check(off); !domain.Is(err, domain.EUnauthorized) {
			t.Fatalf("a token one character off (%.6s...): %v, want unauthorized", off, err)
		}
	}
}

// databaseWith makes a database whose sessions start with settings
// ("name = 'value'", as ALTER DATABASE ... SET takes them).
func databaseWith(t *testing.T, settings ...string) string {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	setup, err := store.OpenPool(ctx, url, store.PoolOptions{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	var name string
	if err := setup.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	for _, set := range settings {
		if _, err := setup.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET "+set); err != nil {
			t.Fatal(err)
		}
	}
	return url
}
