package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// A retry of a run mirrored to GitHub is mirrored to the same commit, so
// that its passing replaces the failed check runs.
func TestRetryKeepsCheckRuns(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	root := pgtest.Admin(t, s, "root")
	p := pgtest.Project(t, s, "p")
	addRepository(t, s, p.ID)
	sha := strings.Repeat("ab", 20)
	run, err := s.CreateRun(ctx, store.NewRun{Project: "p", GitSHA: sha, GitRef: "refs/heads/main",
		Checks: &store.CheckTarget{RepositoryID: 5, HeadSHA: sha}, Jobs: []store.NewJob{{Name: "build"}, {Name: "test"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, root, run.ID, ""); err != nil {
		t.Fatal(err)
	}
	checks := func(runID string) []string {
		rows, err := s.Pool().Query(ctx, `SELECT c.name || '@' || c.head_sha FROM check_runs c JOIN jobs j ON j.id = c.job_id
			WHERE j.run_id = $1 ORDER BY c.name`, runID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	want := []string{"build@" + sha, "test@" + sha}
	retry, err := s.Retry(ctx, root, run.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := checks(retry.ID); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the retry's check runs: %v, want %v", got, want)
	}
	// A run from no GitHub event has none, nor does its retry.
	plain, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "build"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, root, plain.ID, ""); err != nil {
		t.Fatal(err)
	}
	again, err := s.Retry(ctx, root, plain.ID, "")
	if err != nil || len(checks(again.ID)) != 0 {
		t.Fatalf("a plain run's retry: %v %v", checks(again.ID), err)
	}
}

// addRepository connects GitHub repository 5 (acme/app) to project
// projectID, as the App's installation does.
func addRepository(t *testing.T, s *store.Store, projectID string) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(), `INSERT INTO scm_repositories (github_id, full_name, installation_id, webhook_secret, project_id)
		VALUES (5, 'acme/app', 1, 'a webhook secret of length', $1)`, projectID); err != nil {
		t.Fatal(err)
	}
}
