package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/schema"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
)

// TestUpgradeToTenancy: an installation from before projects had members
// migrates cleanly. Every existing project gets every existing user as a
// member with their old global role, but the secrets permission only goes to
// global admins, so a writer's run stops getting secrets; runs keep their
// trust; blobs become held by the (project, tier) of every run that used
// them, at their old key; caches, whose provenance cannot be told, go;
// repositories name their project, created if it had no run yet; and
// plain-text secrets are sealed, and still reach the jobs that name them.
func TestUpgradeToTenancy(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyDatabase(t, fmt.Sprintf("upgrade_%d", len(t.Name())))
	if err := schema.MigrateTo(ctx, url, 4); err != nil {
		t.Fatal(err)
	}
	old, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	src, art := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	for _, q := range []string{
		`INSERT INTO projects (id, name, next_run_number) VALUES ('p1', 'acme/app', 2)`,
		`INSERT INTO users (id, name, role) VALUES ('u-admin', 'ada', 'admin'), ('u-write', 'walt', 'write'), ('u-read', 'rae', 'read')`,
		`INSERT INTO blobs (digest, size) VALUES ('` + src + `', 10), ('` + art + `', 20)`,
		`INSERT INTO runs (id, project_id, number, state, git_ref, source_digest, manifest_digest, source_size, secrets_allowed)
		 VALUES ('r1', 'p1', 1, 'PENDING', 'refs/heads/main', '` + src + `', '` + src + `', 10, true),
		        ('r2', 'p1', 2, 'PENDING', 'refs/pull/7/head', '` + src + `', '` + src + `', 10, false)`,
		`INSERT INTO jobs (id, run_id, name, state, spec) VALUES ('j1', 'r1', 'build', 'PENDING', '{"steps":[]}')`,
		`INSERT INTO artifacts (job_id, generation, name, digest, size) VALUES ('j1', 1, 'dist', '` + art + `', 20)`,
		`INSERT INTO caches (project_id, key, digest, size) VALUES ('p1', 'go-mod-1', '` + art + `', 20)`,
		`INSERT INTO scm_repositories (github_id, full_name, installation_id, webhook_secret, project)
		 VALUES (1, 'octo/hello', 7, 'sixteen chars at least', 'hello'), (2, 'acme/app', 7, 'sixteen chars at least', 'acme/app')`,
		`INSERT INTO project_secrets (project_id, name, value) VALUES ('p1', 'DEPLOY_TOKEN', 'plain-secret')`,
	} {
		if _, err := old.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old.Close(ctx)

	keys, err := secretbox.NewFileKeyring(filepath.Join(t.TempDir(), "k"), true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := schema.MigrateAndSeal(ctx, url, nil, nil); err == nil || !strings.Contains(err.Error(), "plain text") {
		t.Fatalf("sealing without a master key: %v", err)
	}
	if _, sealed, err := schema.MigrateAndSeal(ctx, url, nil, keys); err != nil || sealed != 1 {
		t.Fatalf("upgrade: sealed %d, %v", sealed, err)
	}
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows := func(q string) string {
		t.Helper()
		r, err := db.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for r.Next() {
			vals, _ := r.Values()
			var b strings.Builder
			for _, v := range vals {
				b.WriteString(fmt.Sprint(v))
			}
			out = append(out, b.String())
		}
		return strings.Join(out, "; ")
	}
	for _, c := range []struct{ q, want string }{
		{`SELECT p.name, u.name, m.role, m.secrets FROM project_members m JOIN projects p ON p.id = m.project_id
		  JOIN users u ON u.id = m.user_id ORDER BY 1, 2`,
			"acme/appadaadmintrue; acme/appraereadfalse; acme/appwaltwritefalse; helloadaadmintrue; helloraereadfalse; hellowaltwritefalse"},
		{`SELECT name, role FROM users ORDER BY 1`, "adaadmin; raeuser; waltuser"},
		{`SELECT id, trusted, scope FROM runs ORDER BY 1`, "r1truerefs/heads/main; r2falserefs/pull/7/head"},
		{`SELECT project_id, trusted, substr(digest, 8, 1), s3_key = 'sha256/' || substr(digest, 8) FROM blobs ORDER BY 2, 3`,
			"p1falseatrue; p1trueatrue; p1truebtrue"},
		{`SELECT project_id, trusted FROM artifacts`, "p1true"},
		{`SELECT count(*) FROM caches`, "0"},
		{`SELECT r.full_name, p.name FROM scm_repositories r JOIN projects p ON p.id = r.project_id ORDER BY 1`,
			"acme/appacme/app; octo/hellohello"},
		{`SELECT name, value IS NULL, sealed IS NOT NULL, position('plain-secret'::bytea in sealed) FROM project_secrets`,
			"DEPLOY_TOKENtruetrue0"},
	} {
		if got := rows(c.q); got != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.q, got, c.want)
		}
	}

	// The migrated writer's run is untrusted; the sealed secret still
	// reaches a trusted run's job that names it.
	pool, err := store.OpenPool(ctx, url, store.PoolOptions{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := store.New(pool, store.Limits{})
	st.SetKeyring(keys)
	walt := store.User{ID: "u-write", Name: "walt", Role: store.RoleUser}
	run, err := st.CreateRun(ctx, store.NewRun{Project: "acme/app", By: &walt, Untrusted: true,
		Jobs: []store.NewJob{{Name: "x", Spec: secretSpec()}}})
	if err != nil || run.Trusted || run.Approval != store.ApprovalPending {
		t.Fatalf("the migrated writer's run: %+v %v", run, err)
	}
	if _, err := st.CreateRun(ctx, store.NewRun{Project: "acme/app", By: &walt, Jobs: []store.NewJob{{Name: "x"}}}); err == nil {
		t.Fatal("a run claiming the trusted tier for a writer without the secrets permission was made")
	}
	if _, err := st.CreateRun(ctx, store.NewRun{Project: "acme/app", Jobs: []store.NewJob{{Name: "deploy", Spec: secretSpec()}}}); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, st)
	c, err := st.Claim(ctx, r, nil, 0)
	if err != nil || c == nil || c.Secrets["DEPLOY_TOKEN"] != "plain-secret" {
		t.Fatalf("claim after the upgrade: %+v %v", c, err)
	}
}
