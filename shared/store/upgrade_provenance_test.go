package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/schema"
)

// TestUpgradeKeepsWhoSubmitted: runs made before source_by get the member
// who submitted their snapshot: a submission its own, a run that ran it
// again for someone else (a manual run) whoever first submitted it in its
// project and tier, or, that submission gone, the run's own member; a
// snapshot nobody submitted (a GitHub push's) none.
func TestUpgradeKeepsWhoSubmitted(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyDatabase(t, fmt.Sprintf("upgrade_%d", len(t.Name())))
	if err := schema.MigrateTo(ctx, url, 29); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	for _, q := range []string{
		`INSERT INTO projects (id, name) VALUES ('p1', 'acme/app')`,
		`INSERT INTO blobs (project_id, trusted, digest, size, s3_key) VALUES
		   ('p1', true, '` + a + `', 1, 'sha256/` + strings.Repeat("a", 64) + `'),
		   ('p1', false, '` + a + `', 1, 'sha256/` + strings.Repeat("a", 64) + `'),
		   ('p1', true, '` + b + `', 1, 'sha256/` + strings.Repeat("b", 64) + `')`,
		`INSERT INTO runs (id, project_id, number, state, trigger, source_digest, trusted, actor) VALUES
		   ('r1', 'p1', 1, 'PENDING', 'cli:sam', '` + a + `', true, 'user:sam'),
		   ('r2', 'p1', 2, 'PENDING', 'dispatch:sue', '` + a + `', true, 'user:sue'),
		   ('r3', 'p1', 3, 'PENDING', 'cli:sue', '` + a + `', true, 'user:sue'),
		   ('r4', 'p1', 4, 'PENDING', 'push', '` + b + `', true, 'github:9'),
		   ('r5', 'p1', 5, 'PENDING', 'cli:walt', '` + a + `', false, 'user:walt'),
		   ('r6', 'p1', 6, 'PENDING', 'manual', NULL, true, ''),
		   ('r7', 'p1', 7, 'PENDING', 'dispatch:bob', '` + b + `', true, 'user:bob')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := schema.MigrateTo(ctx, url, 30); err != nil {
		t.Fatal(err)
	}
	// r7 ran snapshot b again, whose submission is gone: its own member.
	want := map[string]string{"r1": "user:sam", "r2": "user:sam", "r3": "user:sue", "r4": "", "r5": "user:walt", "r6": "",
		"r7": "user:bob"}
	rows, err := conn.Query(ctx, `SELECT id, coalesce(source_by, '') FROM runs`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, by string
		if err := rows.Scan(&id, &by); err != nil {
			t.Fatal(err)
		}
		got[id] = by
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("source_by after the upgrade: %v, want %v", got, want)
	}
}

// TestUpgradeRemembersPushes: the push bodies of the deliveries still
// recorded are remembered, and the memory begins at the oldest of them
// (a push GitHub took before may have been forgotten).
func TestUpgradeRemembersPushes(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyDatabase(t, fmt.Sprintf("upgrade_%d", len(t.Name())))
	if err := schema.MigrateTo(ctx, url, 30); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`INSERT INTO projects (id, name) VALUES ('p1', 'acme/app')`,
		`INSERT INTO scm_repositories (github_id, full_name, installation_id, webhook_secret, project_id)
		 VALUES (5, 'acme/app', 1, 'a webhook secret of length', 'p1')`,
		`INSERT INTO scm_deliveries (guid, event, repository_id, payload, body_sha256, received_at) VALUES
		   ('g1', 'push', 5, '{}', sha256('a'), now() - interval '20 days'),
		   ('g2', 'push', 5, '{}', sha256('b'), now() - interval '2 days'),
		   ('g3', 'pull_request', 5, '{}', sha256('c'), now() - interval '25 days')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := schema.MigrateTo(ctx, url, 31); err != nil {
		t.Fatal(err)
	}
	var bodies int
	var days float64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM scm_push_bodies),
		(SELECT extract(epoch FROM now() - started_at) / 86400 FROM scm_push_memory)`).Scan(&bodies, &days); err != nil {
		t.Fatal(err)
	}
	if bodies != 2 || days < 19.9 || days > 20.1 {
		t.Fatalf("after the upgrade: %d push bodies remembered, since %.2f days ago; want 2, 20", bodies, days)
	}
}
