package scm_test

import (
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// TestCheckRunReportPastGitHubBounds: a report whose names and messages
// pass GitHub's bounds on a check run's output (a parameterised test's
// long name, long messages) is cut to them, and the check run completes:
// refused, it stayed in progress for good, a required check never met.
func TestCheckRunReportPastGitHubBounds(t *testing.T) {
	e := setup(t)
	var failures []protocol.TestFailure
	for i := range 20 {
		failures = append(failures, protocol.TestFailure{Class: strings.Repeat("c", 1000), Name: strings.Repeat("é", 500) + string(rune('a'+i)),
			Kind: "failure", Message: strings.Repeat("m", 4000), Text: strings.Repeat("t", 4000), File: "calc/add_test.go", Line: i + 1})
	}
	e.runReported("guid-bounds", func(string) (*protocol.TestSummary, domain.Outcome) {
		return &protocol.TestSummary{Files: 1, Tests: 20, Failed: 20, Failures: failures}, domain.OutcomeFailed
	})
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
