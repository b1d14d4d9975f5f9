package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// TestReportMaskedWhenStored: a test report's text is masked with the
// job's secrets before it is stored, so that what reads it raw (the
// GitHub check run's annotations) never shows a secret a runner did not
// mask.
func TestReportMaskedWhenStored(t *testing.T) {
	ctx := context.Background()
	f := newDeployFixture(t)
	run := pipelineRun(t, f.s, store.NewRun{Project: "p", GitRef: "refs/heads/main", By: &f.root},
		"jobs:\n  test: {secrets: [DEPLOY_TOKEN], steps: [{run: go test}]}\n")
	c := claimJob(t, f.s, f.r, run.ID, "test")
	leak := "login as deploy:project-wide-token failed"
	sum := protocol.TestSummary{Tests: 1, Failed: 1, Failures: []protocol.TestFailure{{Name: "TestLogin project-wide-token",
		Kind: "failure", Message: leak, Text: leak, File: "login_test.go"}}}
	if err := f.s.SetReport(ctx, f.r.ID, c.Lease.JobID, c.Lease, sum); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := f.s.Pool().QueryRow(ctx, `SELECT summary::text FROM job_reports WHERE job_id = $1`, c.Lease.JobID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "project-wide-token") || !strings.Contains(stored, "login as deploy:") {
		t.Fatalf("stored report: %s", stored)
	}
	if sum.Failures[0].Message != leak {
		t.Fatal("the caller's report was changed")
	}
}
