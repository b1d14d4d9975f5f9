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

	guid, err := e.store.RecordDispatch(ctx, repoID, store.DispatchRequest{Ref: "refs/heads/main",
		Inputs: map[string]string{"target": "staging"}, UserID: e.admin.ID, UserName: e.admin.Name, Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	e.runOnce()
	var state, runID string
	if err := e.pool.QueryRow(ctx, `SELECT state, coalesce(run_id, '') FROM scm_deliveries WHERE guid = $1`, guid).Scan(&state, &runID); err != nil {
		t.Fatal(err)
	}
	if state != "DONE" || runID == "" {
		t.Fatalf("the renamed repository's dispatch: %s %q", state, runID)
	}
	run, err := e.store.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
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
