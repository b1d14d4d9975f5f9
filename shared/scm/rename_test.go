package scm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/store"
)

// TestRenamedRepositoryKeepsItsID: a registered repository renamed on
// GitHub, whose old name another repository then took, is still the one
// built: the worker asks GitHub for the name of its ID and records it,
// and its token opens that repository only. Before, the other
// repository's code ran as the project's trusted, secret-holding run,
// since every call went by the registered name.
func TestRenamedRepositoryKeepsItsID(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	const renamed = "octo/hello-renamed"
	dir, sha := gitRepo(t, dispatchYAML)
	e.gh.RenameRepository(repoID, renamed)
	e.gh.AddGitCommit(t, renamed, dir, sha)
	e.gh.AddRef(renamed, "refs/heads/main", sha)
	strangerDir, strangerSHA := gitRepo(t, strings.Replace(dispatchYAML, "echo", "echo stolen", 1))
	e.gh.AddRepository(666, repoName)
	e.gh.AddGitCommit(t, repoName, strangerDir, strangerSHA)
	e.gh.AddRef(repoName, "refs/heads/main", strangerSHA)

	run := e.dispatchMain(repoID)
	if run.GitSHA != sha {
		t.Fatalf("the run built %s, want the renamed repository's %s (the stranger's is %s)", run.GitSHA, sha, strangerSHA)
	}
	if repo, err := e.store.Repository(ctx, repoID); err != nil || repo.FullName != renamed {
		t.Fatalf("the registered name: %q %v, want %s", repo.FullName, err, renamed)
	}
	e.runOnce() // the check run's push
	if len(e.gh.CheckRuns(repoName)) != 0 || len(e.gh.CheckRuns(renamed)) == 0 {
		t.Fatalf("check runs: %d on the old name, %d on the new", len(e.gh.CheckRuns(repoName)), len(e.gh.CheckRuns(renamed)))
	}
}

// TestDownloadErrorHidesTheLink: a tarball download cut off keeps its
// error on the delivery, which project readers see, without the signed
// codeload link (a private repository's carries a token).
func TestDownloadErrorHidesTheLink(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.gh.DropResponses("GET /_codeload/{token}", 5) // net/http retries a GET cut on a reused connection
	body := pushPayload(sha)
	e.deliver("push", "guid-cut", body, sign(repoSecret, body))
	e.runOnce()
	var lastError string
	if err := e.pool.QueryRow(ctx, `SELECT coalesce(last_error, '') FROM scm_deliveries WHERE guid = 'guid-cut'`).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastError, "download tarball") || strings.Contains(lastError, "_codeload") {
		t.Fatalf("the delivery's error: %q", lastError)
	}
}

// TestRepositoriesSwapNames: a registered repository takes the name
// another registered one had (renamed away): its delivery records the
// name, marking the other's stale, and the other learns its own new name
// at its next delivery; both build their own commits and get their check
// runs.
func TestRepositoriesSwapNames(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	otherID, older := e.swapNames()
	shas := map[int64]string{}
	for id, name := range map[int64]string{repoID: older, otherID: repoName} {
		dir, sha := gitRepo(t, strings.Replace(dispatchYAML, "echo", "echo "+name, 1))
		e.gh.AddGitCommit(t, name, dir, sha)
		e.gh.AddRef(name, "refs/heads/main", sha)
		shas[id] = sha
	}
	for _, id := range []int64{otherID, repoID} {
		if run := e.dispatchMain(id); run.GitSHA != shas[id] {
			t.Fatalf("repository %d: the run built %s, want %s", id, run.GitSHA, shas[id])
		}
	}
	for id, want := range map[int64]string{repoID: older, otherID: repoName} {
		if repo, err := e.store.Repository(ctx, id); err != nil || repo.FullName != want {
			t.Fatalf("repository %d is recorded as %q (%v), want %s", id, repo.FullName, err, want)
		}
	}
	e.reconcile()
	if len(e.gh.CheckRuns(older)) == 0 || len(e.gh.CheckRuns(repoName)) == 0 {
		t.Fatalf("check runs: %d on %s, %d on %s", len(e.gh.CheckRuns(older)), older, len(e.gh.CheckRuns(repoName)), repoName)
	}
}

// TestCheckRunFollowsARename: a job's check run updated after its
// repository was renamed, and its old name taken by another registered
// repository (which marks it stale), goes to the repository by its ID.
func TestCheckRunFollowsARename(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-before-rename", body, sign(repoSecret, body))
	e.runOnce()
	e.reconcile()
	otherID, older := e.swapNames()
	if err := e.store.RenameRepository(ctx, otherID, repoName); err != nil {
		t.Fatal(err)
	}
	if repo, _ := e.store.Repository(ctx, repoID); !store.StaleRepositoryName(repo.FullName) {
		t.Fatalf("the renamed repository is recorded as %q", repo.FullName)
	}
	run := e.onlyRun()
	if _, _, err := e.store.Cancel(ctx, e.admin, run.ID, ""); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	checks := e.gh.CheckRuns(older)
	if len(checks) == 0 {
		t.Fatal("no check runs on the renamed repository")
	}
	for _, c := range checks {
		if c.Status != "completed" {
			t.Fatalf("check run %s is %s after the cancel", c.Name, c.Status)
		}
	}
	if repo, _ := e.store.Repository(ctx, repoID); repo.FullName != older {
		t.Fatalf("the renamed repository is recorded as %q, want %s", repo.FullName, older)
	}
}

// dispatchMain asks for a manual run of repository id's main branch, as
// the admin, lets the worker take it, and returns the run it made.
func (e *env) dispatchMain(id int64) store.Run {
	e.t.Helper()
	ctx := context.Background()
	guid, err := e.store.RecordDispatch(ctx, id, store.DispatchRequest{Ref: "refs/heads/main",
		Inputs: map[string]string{"target": "staging"}, UserID: e.admin.ID, UserName: e.admin.Name, Trusted: true})
	if err != nil {
		e.t.Fatal(err)
	}
	e.runOnce()
	var state, runID string
	if err := e.pool.QueryRow(ctx, `SELECT state, coalesce(run_id, '') FROM scm_deliveries WHERE guid = $1`, guid).Scan(&state, &runID); err != nil {
		e.t.Fatal(err)
	}
	if state != "DONE" || runID == "" {
		e.t.Fatalf("the dispatch of repository %d: %s %q", id, state, runID)
	}
	run, err := e.store.GetRun(ctx, runID)
	if err != nil {
		e.t.Fatal(err)
	}
	return run
}

// swapNames registers repository otherID ("octo/other") in the project,
// then on GitHub renames the project's repository to older and gives its
// old name to otherID.
func (e *env) swapNames() (otherID int64, older string) {
	e.t.Helper()
	otherID, older = 77, "octo/hello-old"
	if err := e.store.AddRepository(context.Background(), store.Repository{GitHubID: otherID, FullName: "octo/other",
		InstallationID: installID, WebhookSecret: repoSecret, Project: "hello"}); err != nil {
		e.t.Fatal(err)
	}
	e.gh.RenameRepository(repoID, older)
	e.gh.RenameRepository(otherID, repoName)
	return otherID, older
}
