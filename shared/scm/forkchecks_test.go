package scm_test

import (
	"context"
	"fmt"
	"testing"
)

// TestForkDoesNotRestateTrustedChecks: GitHub shows a commit's newest
// check run of each name, so a fork's pull request whose head is a commit
// a trusted run has built (a maintainer's branch's, fetched into the
// fork) makes no check runs of its own: its jobs, skipped by conditions on
// the event, without secrets, with caches of its own, would restate the
// commit's checks. Its approval adds none either when the trusted run came
// while it waited. A fork's other commit has its checks as before.
func TestForkDoesNotRestateTrustedChecks(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	checks := func(runID string) int {
		t.Helper()
		return e.count(`SELECT count(*) FROM check_runs c JOIN jobs j ON j.id = c.job_id WHERE j.run_id = $1`, runID)
	}
	runOf := func(ref string) string {
		t.Helper()
		var id string
		if err := e.pool.QueryRow(ctx, `SELECT id FROM runs WHERE git_ref = $1 ORDER BY number DESC LIMIT 1`, ref).Scan(&id); err != nil {
			t.Fatalf("the run of %s: %v", ref, err)
		}
		return id
	}
	// forkRun opens fork pull request n at commit and returns its run.
	forkRun := func(n int, commit string) string {
		t.Helper()
		e.pull(n, 556, 902, commit)
		pr := prPayload(commit, n, 556)
		e.deliver("pull_request", fmt.Sprintf("g-pr-%d", n), pr, sign(repoSecret, pr))
		e.runOnce()
		return runOf(fmt.Sprintf("refs/pull/%d/head", n))
	}
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.gh.AddRef(repoName, "refs/heads/main", sha)

	// A fork's pull request at the commit, waiting for approval, before
	// the trusted run: its first job's check run says it waits.
	waiting := forkRun(21, sha)
	if n := checks(waiting); n != 1 {
		t.Fatalf("a waiting fork run has %d check runs, want 1", n)
	}
	push := pushPayload(sha)
	e.deliver("push", "g-push", push, sign(repoSecret, push))
	e.runOnce()
	if n := checks(runOf("refs/heads/main")); n != 2 {
		t.Fatalf("the trusted run has %d check runs, want 2", n)
	}
	if _, err := e.store.Approve(ctx, e.admin, waiting); err != nil {
		t.Fatal(err)
	}
	if n := checks(waiting); n != 1 {
		t.Fatalf("approved after the trusted run of its commit, the fork run has %d check runs, want still 1", n)
	}
	// After the trusted run: none. (The author is approved by now.)
	if n := checks(forkRun(22, sha)); n != 0 {
		t.Fatalf("a fork run of a commit a trusted run built has %d check runs, want 0", n)
	}
	// Another commit of the fork's: its checks as before.
	dir2, sha2 := gitRepo(t, pipelineYAML+"# another\n")
	e.gh.AddGitCommit(t, repoName, dir2, sha2)
	if n := checks(forkRun(23, sha2)); n != 2 {
		t.Fatalf("a fork run of its own commit has %d check runs, want 2", n)
	}
	newcomerWaitsOnce(t, e, sha, sha2, runOf, checks)
}

// newcomerWaitsOnce: a newcomer's waiting run of commit sha, which a
// trusted run built, has no check run, and is still its pull request's
// one waiting run: another event at the commit makes nothing, a newer
// commit's (sha2) run rejects it.
func newcomerWaitsOnce(t *testing.T, e *env, sha, sha2 string, runOf func(string) string, checks func(string) int) {
	t.Helper()
	ctx := context.Background()
	e.pull(24, 557, 903, sha)
	newcomer := func(guid string) {
		pr := prPayload(sha, 24, 557)
		pr = append(pr[:len(pr)-1], []byte(`,"x":"`+guid+`"}`)...) // another body
		e.deliver("pull_request", guid, pr, sign(repoSecret, pr))
		e.runOnce()
	}
	newcomer("g-pr-24")
	first := runOf("refs/pull/24/head")
	if n := checks(first); n != 0 || e.count(`SELECT count(*) FROM runs WHERE approval = 'pending' AND finished_at IS NULL`) != 1 {
		t.Fatalf("the newcomer's run: %d check runs, %d waiting", n, e.count(`SELECT count(*) FROM runs WHERE approval = 'pending'`))
	}
	newcomer("g-pr-24-edited")
	if n := e.count(`SELECT count(*) FROM runs WHERE git_ref = 'refs/pull/24/head'`); n != 1 {
		t.Fatalf("another event at the waiting commit made %d runs in all", n)
	}
	e.pull(24, 557, 903, sha2)
	pr := prPayload(sha2, 24, 557)
	e.deliver("pull_request", "g-pr-24-new", pr, sign(repoSecret, pr))
	e.runOnce()
	if got, err := e.store.GetRun(ctx, first); err != nil || got.Approval != "rejected" {
		t.Fatalf("the waiting run after a newer commit: %+v %v", got, err)
	}
}
