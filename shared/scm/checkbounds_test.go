package scm_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// TestCheckRunReportPastGitHubBounds: a report whose names and messages
// pass GitHub's bounds on a check run's output (a parameterised test's
// long name, long messages) is cut to them, and the check run completes:
// refused, it stayed in progress for good, a required check never met.
func TestCheckRunReportPastGitHubBounds(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	if code, out := e.deliver("push", "guid-bounds", body, sign(repoSecret, body)); code != http.StatusAccepted {
		t.Fatalf("deliver: %d %v", code, out)
	}
	e.runOnce()
	reg, _, _ := e.store.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	_, token, err := e.store.RegisterRunner(ctx, reg, "reporter", nil)
	if err != nil {
		t.Fatal(err)
	}
	runner, _ := e.store.AuthenticateRunner(ctx, token)
	var failures []protocol.TestFailure
	for i := range 20 {
		failures = append(failures, protocol.TestFailure{Class: strings.Repeat("c", 1000), Name: strings.Repeat("é", 500) + string(rune('a'+i)),
			Kind: "failure", Message: strings.Repeat("m", 4000), Text: strings.Repeat("t", 4000), File: "calc/add_test.go", Line: i + 1})
	}
	for {
		c, err := e.store.Claim(ctx, runner, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			break
		}
		sum := protocol.TestSummary{Files: 1, Tests: 20, Failed: 20, Failures: failures}
		if err := e.store.SetReport(ctx, runner.ID, c.Lease.JobID, c.Lease, sum); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Complete(ctx, runner.ID, c.Lease.JobID, c.Lease, domain.OutcomeFailed, 1); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile()
	reported := 0
	for _, c := range e.gh.CheckRuns(repoName) {
		if c.Status != "completed" {
			t.Fatalf("check run %s is %s", c.Name, c.Status)
		}
		if c.Conclusion == "failure" {
			if len(c.Annotations) != 20 {
				t.Fatalf("check run %s: %d annotations", c.Name, len(c.Annotations))
			}
			reported++
		}
	}
	if reported == 0 {
		t.Fatal("no check run shows a report")
	}
}
