package scm_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/store"
)

// TestWaitingPullRequestCostsOnce: a fork's pull request whose author is
// not approved holds at most one run waiting for approval. Another event
// at the same commit (an edited title) makes nothing and downloads
// nothing; a new commit's run rejects the older waiting one, which ends
// CANCELED saying it was superseded; approving the new one starts it.
func TestWaitingPullRequestCostsOnce(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	pipe := "on:\n  pull_request:\n    types: [opened, edited, synchronize]\njobs:\n  only:\n    steps:\n      - run: \"true\"\n"
	dir, sha := gitRepo(t, pipe)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.pull(11, 556, 902, sha)
	deliver := func(guid, action string) {
		t.Helper()
		p := bytes.Replace(prPayload(sha, 11, 556), []byte(`"action":"opened"`), []byte(`"action":"`+action+`"`), 1)
		e.deliver("pull_request", guid, p, sign(repoSecret, p))
	}
	deliver("guid-opened", "opened")
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("opened: %+v", res)
	}
	var first string
	if err := e.pool.QueryRow(ctx, `SELECT id FROM runs WHERE approval = 'pending'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	downloads := e.gh.CountCalls("GET", "/repos/"+repoName+"/tarball/")

	deliver("guid-edited", "edited")
	if res := e.runOnce(); res.Runs != 0 {
		t.Fatalf("edited at the same commit: %+v", res)
	}
	var state, note string
	if err := e.pool.QueryRow(ctx, `SELECT state, coalesce(note, '') FROM scm_deliveries WHERE guid = 'guid-edited'`).Scan(&state, &note); err != nil {
		t.Fatal(err)
	}
	if state != store.DeliveryIgnored || !strings.Contains(note, first+" of this commit already waits for approval") {
		t.Errorf("the edited delivery: %s %q", state, note)
	}
	if n := e.gh.CountCalls("GET", "/repos/"+repoName+"/tarball/"); n != downloads {
		t.Errorf("an event at a waiting commit downloaded it again (%d downloads, was %d)", n, downloads)
	}

	dir2, sha2 := gitRepo(t, pipe+"# the second commit\n")
	e.gh.AddGitCommit(t, repoName, dir2, sha2)
	e.pull(11, 556, 902, sha2)
	deliver("guid-sync", "synchronize")
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("synchronize: %+v", res)
	}
	old, err := e.store.GetRun(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if old.State != "CANCELED" || old.Approval != store.ApprovalRejected || !strings.Contains(old.ApprovalBy, "superseded") {
		t.Fatalf("the older waiting run: %s %s by %q", old.State, old.Approval, old.ApprovalBy)
	}
	var newer string
	if err := e.pool.QueryRow(ctx, `SELECT id FROM runs WHERE approval = 'pending' AND finished_at IS NULL`).Scan(&newer); err != nil {
		t.Fatal(err)
	}
	if run, _ := e.store.GetRun(ctx, newer); run.GitSHA != sha2 {
		t.Fatalf("the waiting run is of %s, want the new commit %s", run.GitSHA, sha2)
	}
	if _, err := e.store.Approve(ctx, e.admin, newer); err != nil {
		t.Fatal(err)
	}
	if claims := e.claimAll(t); len(claims) != 1 {
		t.Fatalf("after approval: %v", claims)
	}
}
