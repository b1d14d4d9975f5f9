package scm_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestWaitingPullRequestCostsOnce: a fork's pull request whose author is
// not approved holds at most one run waiting for approval. Another event
// at the same commit (an edited title) makes nothing and downloads
// nothing; a new commit's run rejects the older waiting one, which ends
// CANCELED saying it was superseded; approving the new one starts it.
// While a run waits, only its first job has a check run on the commit;
// the others come with the approval.
func TestWaitingPullRequestCostsOnce(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	pipe := "on:\n  pull_request:\n    types: [opened, edited, synchronize]\njobs:\n" +
		"  a:\n    steps:\n      - run: \"true\"\n  b:\n    steps:\n      - run: \"true\"\n  c:\n    steps:\n      - run: \"true\"\n"
	checks := func(runID string) int {
		t.Helper()
		return e.count(`SELECT count(*) FROM check_runs c JOIN jobs j ON j.id = c.job_id WHERE j.run_id = $1`, runID)
	}
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
	if n := checks(first); n != 1 {
		t.Errorf("a waiting run of 3 jobs has %d check runs, want 1", n)
	}

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
	if n := checks(newer); n != 1 {
		t.Errorf("the newer waiting run has %d check runs, want 1", n)
	}
	if _, err := e.store.Approve(ctx, e.admin, newer); err != nil {
		t.Fatal(err)
	}
	if n := checks(newer); n != 3 {
		t.Errorf("the approved run has %d check runs, want one per job (3)", n)
	}
	e.reconcile()
	onCommit := 0
	for _, c := range e.gh.CheckRuns(repoName) {
		if c.HeadSHA == sha2 {
			onCommit++
		}
	}
	if onCommit != 3 {
		t.Errorf("%d check runs on the approved commit, want 3", onCommit)
	}
	if claims := e.claimAll(t); len(claims) != 1 {
		t.Fatalf("after approval: %v", claims)
	}
}

// TestWaitingRunsOfTheirOwnRepository: superseding goes by repository and
// pull request: a project's second repository shares pull request refs
// (refs/pull/42/head) with the first, and a stranger's pull request there
// rejects nothing of the first's. A new run that its concurrency group
// cancels at once (an older event's, delivered late) supersedes nothing.
func TestWaitingRunsOfTheirOwnRepository(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if err := e.store.AddRepository(ctx, store.Repository{GitHubID: 77, FullName: "octo/other",
		InstallationID: installID, WebhookSecret: repoSecret, Project: "hello"}); err != nil {
		t.Fatal(err)
	}
	e.gh.AddRepository(77, "octo/other")
	n := 0
	waiting := func(repo int64, pr int, sha string, at time.Time, group *domain.Concurrency) store.Run {
		t.Helper()
		n++
		guid := fmt.Sprintf("g-%d", n)
		if _, err := e.store.RecordDelivery(ctx, guid, "pull_request", repo, []byte(fmt.Sprintf(`{"n":%d}`, n))); err != nil {
			t.Fatal(err)
		}
		d, err := e.store.ClaimDelivery(ctx, time.Minute)
		if err != nil || d == nil || d.GUID != guid {
			t.Fatalf("claim %s: %+v %v", guid, d, err)
		}
		run, err := e.store.CompleteDeliveryWithRun(ctx, d, store.NewRun{Project: "hello", GitRef: fmt.Sprintf("refs/pull/%d/head", pr),
			GitSHA: sha, Untrusted: true, Actor: "github:900", EventAt: at, Concurrency: group,
			Checks: &store.CheckTarget{RepositoryID: repo, HeadSHA: sha}, Jobs: []store.NewJob{{Name: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	pending := func(id string) bool {
		t.Helper()
		r, err := e.store.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Approval == store.ApprovalPending && r.FinishedAt == nil
	}
	shaA, shaB, shaC := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	now := time.Now()
	a := waiting(repoID, 42, shaA, now, nil)
	b := waiting(77, 42, shaB, now, nil)
	if !pending(a.ID) || !pending(b.ID) {
		t.Fatal("another repository's pull request #42 rejected the first's")
	}
	if id, err := e.store.WaitingForApproval(ctx, a.ProjectID, 77, "refs/pull/42/head", shaA, "github:900"); err != nil || id != "" {
		t.Fatalf("the first repository's waiting commit counts for the second: %q %v", id, err)
	}
	c := waiting(repoID, 42, shaC, now, nil)
	if pending(a.ID) || !pending(c.ID) || !pending(b.ID) {
		t.Fatal("a newer commit of the first repository's #42 superseded the wrong runs")
	}

	// A late run of an older event, canceled by its group at once.
	group := &domain.Concurrency{Group: "pr-43", CancelInProgress: true}
	newer := waiting(77, 43, shaA, now, group)
	late := waiting(77, 43, shaB, now.Add(-time.Hour), group)
	if pending(late.ID) || !pending(newer.ID) {
		t.Fatalf("a late run canceled by its group superseded the waiting run (late pending %v, newer pending %v)",
			pending(late.ID), pending(newer.ID))
	}
}

// TestApprovingAnAuthorReleasesTheirRuns: approving a first-time
// contributor's run approves the contributor, and their other pull
// requests' runs that wait start too, as their later ones would.
func TestApprovingAnAuthorReleasesTheirRuns(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	for _, n := range []int{20, 21} {
		e.pull(n, 556, 903, sha)
		p := prPayload(sha, n, 556)
		e.deliver("pull_request", fmt.Sprintf("g-pr-%d", n), p, sign(repoSecret, p))
	}
	if res := e.runOnce(); res.Runs != 2 {
		t.Fatalf("two pull requests: %+v", res)
	}
	var first, second string
	if err := e.pool.QueryRow(ctx, `SELECT min(id), max(id) FROM runs WHERE approval = 'pending'`).Scan(&first, &second); err != nil || first == second {
		t.Fatalf("two waiting runs: %q %q %v", first, second, err)
	}
	if _, err := e.store.Approve(ctx, e.admin, first); err != nil {
		t.Fatal(err)
	}
	other, err := e.store.GetRun(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if other.Approval != store.ApprovalApproved || other.ApprovalBy != "root" {
		t.Fatalf("the author's other waiting run: %s by %q", other.Approval, other.ApprovalBy)
	}
	if jobs, _ := e.store.RunJobs(ctx, second); len(jobs) == 0 || jobs[0].Reason == store.ReasonWaitingApproval {
		t.Fatalf("the other run's jobs still wait: %+v", jobs)
	}
}
