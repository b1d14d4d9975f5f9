package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// deployPipeline builds, then deploys to production with its secret.
const deployPipeline = `jobs:
  build:
    runs-on: linux
    steps: [{run: echo built}]
  deploy:
    needs: build
    runs-on: linux
    environment: {name: Production, url: "https://app.example.com"}
    secrets: [DEPLOY_KEY]
    steps:
      - run: test "$DEPLOY_KEY" = "the-production-key" && echo deployed with the production key
`

// gitPipeline writes yml into a git checkout on branch, so that the
// submitted run's ref is refs/heads/<branch>.
func gitPipeline(t *testing.T, yml, branch string) string {
	t.Helper()
	dir := writePipeline(t, yml)
	for _, args := range [][]string{{"init", "-q", "-b", branch}, {"add", "."},
		{"-c", "user.name=e2e", "-c", "user.email=e2e@example.com", "commit", "-q", "-m", "pipeline"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	return dir
}

// testDeployments: an environment's rules with real runners, set with the
// CLI: a run on main waits for a review, is approved in the dashboard and
// deploys with the environment's secret; a run on another branch is
// refused by the branch rule; a rejection from the CLI fails the job;
// the environment's history page shows all three.
func testDeployments(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		if out, err := s.cli("env", "set", "e2e", "production", "--reviewers", "write", "--allow", "main"); err != nil {
			t.Fatalf("env set: %v %s", err, out)
		}
		cmd := exec.Command(s.bin+"/forgeci", "secret", "set", "--project", "e2e", "--name", "DEPLOY_KEY", "--environment", "production")
		cmd.Env = append(os.Environ(), "FORGECI_URL="+s.vals["FORGECI_URL"], "FORGECI_TOKEN="+s.vals["FORGECI_TOKEN"])
		cmd.Stdin = strings.NewReader("the-production-key\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("secret set: %v %s", err, out)
		}
		approved := s.waitingDeploy(t, gitPipeline(t, deployPipeline, "main"))
		browser := s.approveInDashboard(t, approved)
		v := s.waitRun(approved, func(v runView) bool { return v.State == "PASSED" || v.State == "FAILED" }, 90*time.Second)
		if v.State != "PASSED" || !strings.Contains(s.log(approved, jobNamed(v, "deploy")), "deployed with the production key") {
			t.Fatalf("approved run: %+v", v)
		}

		feature, err := s.submit(gitPipeline(t, deployPipeline, "feature/x"), false)
		if err != nil {
			t.Fatal(err)
		}
		v = s.waitRun(feature, func(v runView) bool { return v.State == "FAILED" }, 60*time.Second)
		if r := jobReason(v, "deploy"); !strings.Contains(r, "does not allow refs/heads/feature/x to deploy") {
			t.Fatalf("branch rule: %q", r)
		}

		rejected := s.waitingDeploy(t, gitPipeline(t, deployPipeline, "main"))
		if out, err := s.cli("deploy", "reject", rejected, "deploy", "-m", "not on a Friday"); err != nil {
			t.Fatalf("deploy reject: %v %s", err, out)
		}
		v = s.waitRun(rejected, func(v runView) bool { return v.State == "FAILED" }, 30*time.Second)
		if r := jobReason(v, "deploy"); r != "deployment to production rejected by admin: not on a Friday" {
			t.Fatalf("rejected: %q", r)
		}
		out, err := s.cli("deployments", "e2e", "--environment", "production")
		for _, want := range []string{"approved", "refused", "rejected", "refs/heads/main", "refs/heads/feature/x"} {
			if err != nil || !strings.Contains(out, want) {
				t.Fatalf("history lacks %q: %v\n%s", want, err, out)
			}
		}
		// The dashboard's history says the same, with the reasons.
		if err := chromedp.Do(browser, chromedp.Navigate(s.vals["FORGECI_URL"]+"/projects/e2e/environments/production"),
			chromedp.WaitVisible(chromedp.ID("deployments"))); err != nil {
			t.Fatal(err)
		}
		history, err := chromedp.Run(browser, chromedp.Text(chromedp.ID("deployments")))
		for _, want := range []string{"refused (environment production does not allow refs/heads/feature/x", "rejected (not on a Friday)", "approved (looks good)"} {
			if err != nil || !strings.Contains(history, want) {
				t.Fatalf("dashboard history lacks %q: %v\n%s", want, err, history)
			}
		}
	}
}

// waitingDeploy submits dir and waits until its deploy job waits for a
// review.
func (s *stack) waitingDeploy(t *testing.T, dir string) string {
	t.Helper()
	id, err := s.submit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	v := s.waitRun(id, func(v runView) bool { return strings.Contains(jobReason(v, "deploy"), "waiting for a review") }, 60*time.Second)
	if st := states(v); st["build"] != "PASSED" || st["deploy"] != "PENDING" {
		t.Fatalf("waiting run: %v", st)
	}
	return id
}

// approveInDashboard logs in, opens the waiting job and approves it, and
// then sees the approval in the environment's history; it returns the
// logged-in browser.
func (s *stack) approveInDashboard(t *testing.T, runID string) context.Context {
	t.Helper()
	ctx := newBrowser(t)
	url := s.vals["FORGECI_URL"]
	watchCSP(t, ctx)
	jobURL := url + "/runs/" + runID + "/jobs/" + jobNamed(s.run(runID), "deploy")
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		step, cancel := context.WithTimeout(ctx, 45*time.Second)
		defer cancel()
		if err := chromedp.Do(step, actions...); err != nil {
			html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
			t.Fatalf("%s: %v\npage:\n%.3000s", what, err, html)
		}
	}
	do("log in and open the waiting job", chromedp.Navigate(url+"/login?next="+strings.TrimPrefix(jobURL, url)),
		chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), s.vals["FORGECI_TOKEN"]),
		chromedp.Click(chromedp.ID("login")), chromedp.WaitVisible(chromedp.ID("deploy-waiting")))
	screenshot(t, ctx, "deployment-review")
	do("approve", chromedp.SendKeys(chromedp.ID("deploy-comment"), "looks good"),
		chromedp.Click(chromedp.ID("deploy-approve")), chromedp.WaitNotPresent(chromedp.ID("deploy-waiting")))
	do("open the history", chromedp.Click(chromedp.ID("job-environment")), chromedp.WaitVisible(chromedp.ID("deployments")))
	history, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("deployments")))
	if err != nil || !strings.Contains(history, "approved (looks good)") || !strings.Contains(history, "admin") {
		t.Fatalf("history page: %v\n%s", err, history)
	}
	screenshot(t, ctx, "environment-history")
	noCSPViolation(t, ctx, "the deployment pages")
	return ctx
}

func jobNamed(v runView, name string) string {
	for _, j := range v.Jobs {
		if j.Name == name {
			return j.ID
		}
	}
	return ""
}

func jobReason(v runView, name string) string {
	for _, j := range v.Jobs {
		if j.Name == name {
			return j.Reason
		}
	}
	return ""
}
