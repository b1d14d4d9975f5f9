package scm_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/scm/fakegithub"
	"github.com/forgeci/forgeci/shared/store"
)

// TestCheckRunCarriesReport: a job's test report reaches its check run:
// the counts in its title and summary, the failures listed, and an
// annotation at each failure's file:line in the repository (not at a path
// outside it).
func TestCheckRunCarriesReport(t *testing.T) {
	e := setup(t)
	e.runReported("guid-report", func(job string) (*protocol.TestSummary, domain.Outcome) {
		if job != "test" {
			return nil, domain.OutcomePassed
		}
		return &protocol.TestSummary{Files: 1, Tests: 3, Passed: 1, Failed: 1, Errored: 1, Failures: []protocol.TestFailure{
			{Class: "calc", Name: "TestAdd", Kind: "failure", Message: "want 4, got 5\nmore", File: "calc/add_test.go", Line: 12},
			{Name: "TestBoom", Kind: "error", Message: "panic", File: "/tmp/elsewhere.go", Line: 3}}}, domain.OutcomeFailed
	})
	e.reconcile()
	var test *fakegithub.CheckRun
	for _, c := range e.gh.CheckRuns(repoName) {
		if c.Name == "test" {
			test = &c
		}
	}
	if test == nil || test.Output.Title != "Failed: 2 of 3 tests failed" {
		t.Fatalf("the test job's check run: %+v", test)
	}
	for _, want := range []string{"**Tests**: 1 passed, 1 failed, 1 errored, 0 skipped", "`calc.TestAdd` (`calc/add_test.go:12`): `want 4, got 5`", "`TestBoom` (`/tmp/elsewhere.go:3`): `panic`"} {
		if !strings.Contains(test.Output.Summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, test.Output.Summary)
		}
	}
	if len(test.Annotations) != 1 || test.Annotations[0].Path != "calc/add_test.go" || test.Annotations[0].StartLine != 12 ||
		test.Annotations[0].AnnotationLevel != "failure" || test.Annotations[0].Message != "want 4, got 5\nmore" {
		t.Fatalf("annotations %+v", test.Annotations)
	}
}

// runReported makes a run of a push (delivery guid) and runs its jobs to
// the end with one runner: each job's report and outcome are what report
// says for its name (no report: nil).
func (e *env) runReported(guid string, report func(job string) (*protocol.TestSummary, domain.Outcome)) {
	e.t.Helper()
	ctx := context.Background()
	dir, sha := gitRepo(e.t, pipelineYAML)
	e.gh.AddGitCommit(e.t, repoName, dir, sha)
	body := pushPayload(sha)
	if code, out := e.deliver("push", guid, body, sign(repoSecret, body)); code != http.StatusAccepted {
		e.t.Fatalf("deliver: %d %v", code, out)
	}
	e.runOnce()
	reg, _, _ := e.store.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	_, token, err := e.store.RegisterRunner(ctx, reg, "reporter", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	runner, _ := e.store.AuthenticateRunner(ctx, token)
	for {
		c, err := e.store.Claim(ctx, runner, nil, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		if c == nil {
			return
		}
		var job struct{ Name string }
		_ = json.Unmarshal(c.Job, &job)
		sum, outcome := report(job.Name)
		if sum != nil {
			if err := e.store.SetReport(ctx, runner.ID, c.Lease.JobID, c.Lease, *sum); err != nil {
				e.t.Fatal(err)
			}
		}
		if _, err := e.store.Complete(ctx, runner.ID, c.Lease.JobID, c.Lease, outcome, 1); err != nil {
			e.t.Fatal(err)
		}
	}
}
