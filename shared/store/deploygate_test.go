package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// deployPipeline builds, then deploys to ENV (with the secret
// DEPLOY_TOKEN), then runs after.
const deployPipeline = `jobs:
  build: {steps: [{run: make}]}
  deploy:
    needs: build
    environment: {name: ENV, url: 'https://${{ github.ref_name }}.example.com'}
    secrets: [DEPLOY_TOKEN]
    steps: [{run: ./deploy}]
  after: {needs: deploy, steps: [{run: x}]}
`

type deployFixture struct {
	s                    *store.Store
	r                    store.Runner
	root, writer, reader store.User
}

func newDeployFixture(t *testing.T) deployFixture {
	t.Helper()
	ctx := context.Background()
	s, _, _ := kmsStore(t)
	p := pgtest.Project(t, s, "p")
	f := deployFixture{s: s, r: featuredRunner(t, s), root: pgtest.Admin(t, s, "root")}
	for _, m := range []struct {
		into *store.User
		name string
		role string
	}{{&f.writer, "writer", store.RoleWrite}, {&f.reader, "reader", store.RoleRead}} {
		u, _, err := s.CreateUser(ctx, m.name, "user")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetMember(ctx, f.root, p.ID, u.ID, m.role, false); err != nil {
			t.Fatal(err)
		}
		*m.into = u
	}
	if _, err := s.SetEnvironment(ctx, f.root, "p", store.Environment{Name: "Production", ReviewerRole: store.RoleWrite,
		AllowedRefs: []string{"main", "release/*", "refs/tags/v*"}}); err != nil {
		t.Fatal(err)
	}
	must(t, s.SetSecret(ctx, f.root, p.ID, "DEPLOY_TOKEN", "project-wide-token"))
	must(t, s.SetScopedSecret(ctx, f.root, p.ID, "production", "DEPLOY_TOKEN", "production-token"))
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildThen makes a run of deployPipeline to env on ref and passes build.
func (f deployFixture) buildThen(t *testing.T, ref, env string) store.Run {
	t.Helper()
	run := groupRun(t, f.s, ref, strings.ReplaceAll(deployPipeline, "ENV", env))
	complete(t, f.s, f.r, claimJob(t, f.s, f.r, run.ID, "build"), domain.OutcomePassed)
	return run
}

func (f deployFixture) deployments(t *testing.T, env string) []store.Deployment {
	t.Helper()
	list, _, err := f.s.Deployments(context.Background(), f.reader, "p", env, store.Page{})
	must(t, err)
	return list
}

// TestDeployReviewed: a job deploying to an environment with reviewers
// waits, visibly, once its needs end; a reader may not approve it, a
// writer may; approved, it is queued and its claim carries the
// environment's secret in place of the project's. Its deployment is in
// the history with who approved it.
func TestDeployReviewed(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	run := f.buildThen(t, "refs/heads/main", "Production")
	deployID := jobColumn(t, f.s, run.ID, "id")["deploy"]
	if got := states(t, f.s, run.ID)["deploy"]; got != "PENDING" {
		t.Fatalf("deploy is %s", got)
	}
	if got := reasons(t, f.s, run.ID)["deploy"]; got != "waiting for a review to deploy to production" {
		t.Fatalf("reason %q", got)
	}
	if c, err := f.s.Claim(ctx, f.r, nil, 0); err != nil || c != nil {
		t.Fatalf("claimed %v %v while the deployment waits", c, err)
	}
	d := f.deployments(t, "production")
	if len(d) != 1 || d[0].Decision != "waiting" || d[0].JobID != deployID || d[0].URL != "https://main.example.com" || d[0].Ref != "refs/heads/main" {
		t.Fatalf("history %+v", d)
	}
	if _, err := f.s.DecideDeployment(ctx, f.reader, run.ID, deployID, true, ""); domain.ErrorCode(err) != domain.EForbidden {
		t.Fatalf("a reader approved: %v", err)
	}
	job, err := f.s.DecideDeployment(ctx, f.writer, run.ID, deployID, true, "ship it")
	must(t, err)
	if job.State != "QUEUED" || job.Environment != "production" || job.DeployState != "approved" {
		t.Fatalf("approved job %+v", job.JobInfo)
	}
	if _, err := f.s.DecideDeployment(ctx, f.writer, run.ID, deployID, true, ""); domain.ErrorCode(err) != domain.EConflict {
		t.Fatalf("approved twice: %v", err)
	}
	c := claimJob(t, f.s, f.r, run.ID, "deploy")
	if c.Secrets["DEPLOY_TOKEN"] != "production-token" {
		t.Fatalf("claim secrets %v", c.Secrets)
	}
	// Its log is masked with the environment's value, and the reason too.
	l := c.Lease
	if _, err := f.s.AppendLog(ctx, f.r.ID, l.JobID, l, 0, []byte("using production-token now\n")); err != nil {
		t.Fatal(err)
	}
	if w, err := f.s.ReadLogAs(ctx, f.reader, l.RunID, l.JobID, 0, 0, 1<<20); err != nil || string(w.Data) != "using *** now\n" {
		t.Fatalf("log as shown: %q %v", w.Data, err)
	}
	d = f.deployments(t, "")
	if len(d) != 1 || d[0].Decision != "approved" || d[0].DecidedBy != "writer" || d[0].DecidedAt == nil || d[0].State != "RUNNING" {
		t.Fatalf("history %+v", d)
	}
}

// TestDeployRefusedAndRejected: a ref the environment does not allow
// fails the job with the reason, and its dependants are skipped; a
// rejected deployment fails the same way, saying who rejected it.
func TestDeployRefusedAndRejected(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	feature := f.buildThen(t, "refs/heads/feature/x", "production")
	got, why := states(t, f.s, feature.ID), reasons(t, f.s, feature.ID)["deploy"]
	if got["deploy"] != "FAILED" || got["after"] != "SKIPPED" || !strings.Contains(why, "does not allow refs/heads/feature/x") {
		t.Fatalf("states %v reason %q", got, why)
	}
	for _, ref := range []string{"refs/heads/release/1.2", "refs/tags/v1.0"} {
		run := f.buildThen(t, ref, "production")
		if got := states(t, f.s, run.ID)["deploy"]; got != "PENDING" {
			t.Fatalf("%s: deploy is %s, want waiting", ref, got)
		}
	}
	main := f.buildThen(t, "refs/heads/main", "PRODUCTION")
	deployID := jobColumn(t, f.s, main.ID, "id")["deploy"]
	job, err := f.s.DecideDeployment(ctx, f.root, main.ID, deployID, false, "not today")
	must(t, err)
	if job.State != "FAILED" || job.Reason != "deployment to production rejected by root: not today" {
		t.Fatalf("rejected job %+v", job.JobInfo)
	}
	if got := states(t, f.s, main.ID)["after"]; got != "SKIPPED" {
		t.Fatalf("after is %s", got)
	}
	decisions := map[string]int{}
	for _, d := range f.deployments(t, "production") {
		decisions[d.Decision]++
	}
	if decisions["refused"] != 1 || decisions["rejected"] != 1 || decisions["waiting"] != 2 {
		t.Fatalf("history %v", decisions)
	}
}

// TestDeployUnprotected: an environment without rules (or none made)
// deploys at once, with the project's secrets only, and is in the
// history as automatic; an untrusted run does not deploy at all.
func TestDeployUnprotected(t *testing.T) {
	f := newDeployFixture(t)
	run := f.buildThen(t, "refs/heads/anything", "staging")
	c := claimJob(t, f.s, f.r, run.ID, "deploy")
	if c.Secrets["DEPLOY_TOKEN"] != "project-wide-token" {
		t.Fatalf("claim secrets %v", c.Secrets)
	}
	if d := f.deployments(t, "staging"); len(d) != 1 || d[0].Decision != "automatic" {
		t.Fatalf("history %+v", d)
	}
	untrusted := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", Untrusted: true, Trigger: "fork", Actor: "github:forker"},
		strings.ReplaceAll(deployPipeline, "ENV", "staging"))
	if _, err := f.s.Approve(context.Background(), f.root, untrusted.ID); err != nil {
		t.Fatal(err)
	}
	complete(t, f.s, f.r, claimJob(t, f.s, f.r, untrusted.ID, "build"), domain.OutcomePassed)
	// An untrusted run does not deploy, even where a trusted one would
	// at once: its deploy job fails (a skipped check would pass GitHub's
	// branch protection), refused in the history.
	if c, err := f.s.Claim(context.Background(), f.r, nil, 0); err != nil || c != nil {
		t.Fatalf("an untrusted run's deploy job was claimed: %+v %v", c, err)
	}
	if st := states(t, f.s, untrusted.ID)["deploy"]; st != domain.JobFailed {
		t.Fatalf("the untrusted run's deploy job is %s, want FAILED (%v)", st, reasons(t, f.s, untrusted.ID))
	}
	refused := false
	for _, d := range f.deployments(t, "staging") {
		refused = refused || (d.RunID == untrusted.ID && d.Decision == "refused")
	}
	if !refused {
		t.Fatalf("the untrusted run's deployment is not refused in the history: %+v", f.deployments(t, "staging"))
	}
	// One that waited for a review from before is not approved.
	if _, err := f.s.Pool().Exec(context.Background(), `UPDATE jobs SET state = 'PENDING', deploy_state = 'waiting', finished_at = NULL
		WHERE run_id = $1 AND name = 'deploy'`, untrusted.ID); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.DecideDeployment(context.Background(), f.root, untrusted.ID, jobColumn(t, f.s, untrusted.ID, "id")["deploy"], true, "")
	if !domain.Is(err, domain.EForbidden) {
		t.Fatalf("approving an untrusted run's waiting deployment: %v, want forbidden", err)
	}
}

// TestDeploymentKeepsItsInputs: a manual run's inputs reach its scripts,
// so its deployment's history keeps them as it was gated with them.
func TestDeploymentKeepsItsInputs(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	run := groupRun(t, f.s, "refs/heads/main", strings.ReplaceAll(deployPipeline, "ENV", "production"))
	_, err := f.s.Pool().Exec(ctx, `UPDATE runs SET inputs = '{"target": "eu-1", "dry": false}' WHERE id = $1`, run.ID)
	must(t, err)
	complete(t, f.s, f.r, claimJob(t, f.s, f.r, run.ID, "build"), domain.OutcomePassed)
	d := f.deployments(t, "production")
	if len(d) != 1 || d[0].Inputs["target"] != "eu-1" || d[0].Inputs["dry"] != false {
		t.Fatalf("history %+v, want the run's inputs", d)
	}
}
