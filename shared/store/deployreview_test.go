package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestDeployDecisionRacesCancel: a review and a cancel of the same run
// at once never deadlock (both take the run's lock first); whichever
// comes second sees the first's outcome.
func TestDeployDecisionRacesCancel(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	for i := range 12 {
		run := f.buildThen(t, "refs/heads/main", "production")
		deployID := jobColumn(t, f.s, run.ID, "id")["deploy"]
		var decideErr, cancelErr error
		var wg sync.WaitGroup
		wg.Go(func() { _, decideErr = f.s.DecideDeployment(ctx, f.writer, run.ID, deployID, i%2 == 0, "") })
		wg.Go(func() { _, _, cancelErr = f.s.Cancel(ctx, f.writer, run.ID, "") })
		wg.Wait()
		for _, err := range []error{decideErr, cancelErr} {
			if err != nil && domain.ErrorCode(err) != domain.EConflict {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		for {
			c, err := f.s.Claim(ctx, f.r, nil, 0)
			if err != nil || c == nil {
				break
			}
			complete(t, f.s, f.r, c, domain.OutcomePassed)
		}
	}
}

// TestDeployReviewRules: the rules are read again when the decision is
// made: a ref no longer allowed cannot be approved (only rejected), self
// review is refused where prevented, a comment must be text, and a
// deployment whose run was canceled while it waited shows as canceled.
func TestDeployReviewRules(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	run := f.buildThen(t, "refs/heads/release/1.0", "production")
	deployID := jobColumn(t, f.s, run.ID, "id")["deploy"]
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "production", ReviewerRole: store.RoleWrite,
		AllowedRefs: []string{"main"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.DecideDeployment(ctx, f.writer, run.ID, deployID, true, ""); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "no longer allows refs/heads/release/1.0") {
		t.Fatalf("approved a ref no longer allowed: %v", err)
	}
	for _, bad := range []string{"a\x00b", "line\nbreak", "\xff"} {
		if _, err := f.s.DecideDeployment(ctx, f.writer, run.ID, deployID, false, bad); domain.ErrorCode(err) != domain.EInvalid {
			t.Fatalf("comment %q: %v", bad, err)
		}
	}
	if _, err := f.s.DecideDeployment(ctx, f.writer, run.ID, deployID, false, "release branches are frozen"); err != nil {
		t.Fatal(err)
	}

	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "production", ReviewerRole: store.RoleWrite,
		AllowedRefs: []string{"main"}, PreventSelfReview: true}); err != nil {
		t.Fatal(err)
	}
	own := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", Trigger: "submit", By: &f.root},
		strings.ReplaceAll(deployPipeline, "ENV", "production"))
	complete(t, f.s, f.r, claimJob(t, f.s, f.r, own.ID, "build"), domain.OutcomePassed)
	ownDeploy := jobColumn(t, f.s, own.ID, "id")["deploy"]
	if _, err := f.s.DecideDeployment(ctx, f.root, own.ID, ownDeploy, true, ""); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "prevents self-review") {
		t.Fatalf("self-approved: %v", err)
	}
	// The writer's run of the snapshot root submitted is still root's
	// code, not for root to review (a trusted run: the writer has the
	// secrets permission now).
	p, err := f.s.GetProject(ctx, f.root, "p")
	must(t, err)
	_, err = f.s.SetMember(ctx, f.root, p.ID, f.writer.ID, store.RoleWrite, true)
	must(t, err)
	theirs := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", Trigger: "dispatch", Actor: "user:" + f.writer.ID,
		SourceBy: "user:" + f.root.ID}, strings.ReplaceAll(deployPipeline, "ENV", "production"))
	complete(t, f.s, f.r, claimJob(t, f.s, f.r, theirs.ID, "build"), domain.OutcomePassed)
	if _, err := f.s.DecideDeployment(ctx, f.root, theirs.ID, jobColumn(t, f.s, theirs.ID, "id")["deploy"], true, ""); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "the snapshot you submitted") {
		t.Fatalf("approved a run of the snapshot they submitted: %v", err)
	}
	if _, _, err := f.s.Cancel(ctx, f.root, own.ID, ""); err != nil {
		t.Fatal(err)
	}
	job, err := f.s.GetJob(ctx, f.reader, own.ID, ownDeploy)
	if err != nil || job.State != "CANCELED" || job.DeployState != "" {
		t.Fatalf("canceled job %+v %v", job.JobInfo, err)
	}
	decisions := map[string]string{}
	for _, d := range f.deployments(t, "production") {
		decisions[d.RunID] = d.Decision
	}
	if decisions[run.ID] != "rejected" || decisions[own.ID] != "canceled" {
		t.Fatalf("history %v", decisions)
	}
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "x", PreventSelfReview: true}); domain.ErrorCode(err) != domain.EInvalid {
		t.Fatalf("prevent_self_review without reviewers: %v", err)
	}
}

// TestDeployURLAndSecretNames: an environment URL that is not a plain
// http(s) URL (a NUL, a javascript: scheme) is dropped, not stored and
// not a reason to fail; readers see environments without their secrets'
// names, admins with them.
func TestDeployURLAndSecretNames(t *testing.T) {
	f := newDeployFixture(t)
	for _, url := range []string{`"${{ fromJSON(format('\"https://{0}\\u0000\"', github.ref_name)) }}"`, "javascript:alert(1)"} {
		file := "jobs:\n  build: {steps: [{run: make}]}\n  deploy:\n    needs: build\n    environment:\n      name: staging\n      url: " + url +
			"\n    steps: [{run: ./deploy}]\n"
		run2 := groupRun(t, f.s, "refs/heads/main", file)
		complete(t, f.s, f.r, claimJob(t, f.s, f.r, run2.ID, "build"), domain.OutcomePassed)
		if got := states(t, f.s, run2.ID)["deploy"]; got != "QUEUED" {
			t.Fatalf("url %q: deploy %s (%v)", url, got, reasons(t, f.s, run2.ID))
		}
		for _, d := range f.deployments(t, "staging") {
			if d.RunID == run2.ID && d.URL != "" {
				t.Fatalf("url %q stored as %q", url, d.URL)
			}
		}
		for {
			c, err := f.s.Claim(context.Background(), f.r, nil, 0)
			if err != nil || c == nil {
				break
			}
			complete(t, f.s, f.r, c, domain.OutcomePassed)
		}
	}
	// A fork's run names an environment and a URL: its deployment is in
	// the history (its trigger says whence), without the link.
	if _, err := f.s.Pool().Exec(context.Background(), `INSERT INTO approved_actors (project_id, actor, approved_by, run_id)
		SELECT id, 'github:666', 'root', NULL FROM projects WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	file := "jobs:\n  deploy:\n    environment: {name: staging, url: 'https://evil.example/login'}\n    steps: [{run: ./deploy}]\n"
	fork := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/pull/9/head", Trigger: "github:pull_request #9 from fork x/y",
		Untrusted: true, Actor: "github:666"}, file)
	trusted := groupRun(t, f.s, "refs/heads/main", file)
	urls := map[string]string{}
	for _, d := range f.deployments(t, "staging") {
		urls[d.RunID] = d.URL
	}
	if u, ok := urls[fork.ID]; !ok || u != "" {
		t.Fatalf("the fork's deployment: recorded %v, URL %q", ok, u)
	}
	if urls[trusted.ID] != "https://evil.example/login" {
		t.Fatalf("a trusted run's URL: %q", urls[trusted.ID])
	}
	envs, err := f.s.Environments(context.Background(), f.reader, "p")
	if err != nil || len(envs) != 1 || envs[0].Secrets != nil {
		t.Fatalf("reader sees %+v %v", envs, err)
	}
	envs, err = f.s.Environments(context.Background(), f.root, "p")
	if err != nil || len(envs) != 1 || strings.Join(envs[0].Secrets, ",") != "DEPLOY_TOKEN" {
		t.Fatalf("admin sees %+v %v", envs, err)
	}
}

// TestDeployApprovalNeedsTheAuthors: a deployment can wait for days; its
// approval is refused once the member who started the run, or whose
// snapshot it runs, may no longer start trusted runs (removed, or without
// the secrets permission), so that it never hands the environment's
// secrets to their code. Rejecting it still works.
func TestDeployApprovalNeedsTheAuthors(t *testing.T) {
	for name, tc := range map[string]struct {
		started bool // mallory started the run, else root ran her snapshot
		leave   func(f deployFixture, p, mallory string) error
	}{
		"removed":                 {true, func(f deployFixture, p, m string) error { return f.s.RemoveMember(context.Background(), f.root, p, m) }},
		"secrets taken":           {true, func(f deployFixture, p, m string) error { return setMember(f, p, m, false) }},
		"snapshot author removed": {false, func(f deployFixture, p, m string) error { return f.s.RemoveMember(context.Background(), f.root, p, m) }},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f := newDeployFixture(t)
			p, err := f.s.GetProject(ctx, f.root, "p")
			must(t, err)
			mallory, _, err := f.s.CreateUser(ctx, "mallory", "user")
			must(t, err)
			must(t, setMember(f, p.ID, mallory.ID, true))
			by := &f.root
			if tc.started {
				by = &mallory
			}
			run := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: by, SourceBy: "user:" + mallory.ID},
				strings.ReplaceAll(deployPipeline, "ENV", "production"))
			complete(t, f.s, f.r, claimJob(t, f.s, f.r, run.ID, "build"), domain.OutcomePassed)
			deploy := jobColumn(t, f.s, run.ID, "id")["deploy"]
			must(t, tc.leave(f, p.ID, mallory.ID))
			if _, err := f.s.DecideDeployment(ctx, f.writer, run.ID, deploy, true, ""); domain.ErrorCode(err) != domain.EForbidden ||
				!strings.Contains(err.Error(), "reject it") {
				t.Fatalf("approval of mallory's code after she left: %v", err)
			}
			if _, err := f.s.DecideDeployment(ctx, f.writer, run.ID, deploy, false, "she left"); err != nil {
				t.Fatalf("rejection: %v", err)
			}
		})
	}
}

func setMember(f deployFixture, project, user string, secrets bool) error {
	_, err := f.s.SetMember(context.Background(), f.root, project, user, store.RoleWrite, secrets)
	return err
}

// TestRetrierMayNotSelfApprove: a retry keeps its run's actor, but where
// an environment prevents self-review the member who retried the run may
// not approve its deployment (they chose to deploy that commit again):
// another reviewer may, while the retrier may still start trusted runs.
func TestRetrierMayNotSelfApprove(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	bob, _, err := f.s.CreateUser(ctx, "bob", "user")
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.s.GetProject(ctx, f.root, "p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.SetMember(ctx, f.root, p.ID, bob.ID, store.RoleWrite, true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "production", ReviewerRole: store.RoleWrite,
		AllowedRefs: []string{"main"}, PreventSelfReview: true}); err != nil {
		t.Fatal(err)
	}
	old := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", Trigger: "submit", By: &f.root},
		strings.ReplaceAll(deployPipeline, "ENV", "production"))
	if _, _, err := f.s.Cancel(ctx, f.root, old.ID, ""); err != nil {
		t.Fatal(err)
	}
	retry, err := f.s.Retry(ctx, bob, old.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.GetRun(ctx, retry.ID); err != nil || got.RetriedBy != "user:"+bob.ID || got.Actor != old.Actor {
		t.Fatalf("the retry: actor %q, retried by %q (%v)", got.Actor, got.RetriedBy, err)
	}
	complete(t, f.s, f.r, claimJob(t, f.s, f.r, retry.ID, "build"), domain.OutcomePassed)
	deploy := jobColumn(t, f.s, retry.ID, "id")["deploy"]
	if _, err := f.s.DecideDeployment(ctx, bob, retry.ID, deploy, true, ""); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "a run you retried") {
		t.Fatalf("the retrier approved: %v", err)
	}
	// The retrier must still be allowed to start trusted runs.
	if _, err := f.s.SetMember(ctx, f.root, p.ID, bob.ID, store.RoleWrite, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.DecideDeployment(ctx, f.writer, retry.ID, deploy, true, ""); domain.ErrorCode(err) != domain.EForbidden ||
		!strings.Contains(err.Error(), "run was retried by a member who no longer has the secrets permission") {
		t.Fatalf("approved the retry of a member without the secrets permission since: %v", err)
	}
	if _, err := f.s.SetMember(ctx, f.root, p.ID, bob.ID, store.RoleWrite, true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.DecideDeployment(ctx, f.writer, retry.ID, deploy, true, ""); err != nil {
		t.Fatalf("another reviewer: %v", err)
	}
}
