package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
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

// TestSecretsOpenedOnlyForTheLease: a failed completion's reason and a
// test report are masked with the job's secrets, which are opened (KMS)
// only once the lease is found to be the caller's: another runner's call
// for the job, whatever lease it sends, is refused without asking KMS.
func TestSecretsOpenedOnlyForTheLease(t *testing.T) {
	ctx := context.Background()
	s, kms, keys, r := secretJobStore(t, store.NewJob{Name: "deploy", Spec: secretSpec()})
	c, err := s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v", err)
	}
	// Another container, whose data keys are not cached, serves the calls.
	s = coldStore(s, keys)
	stranger := newRunner(t, s)
	before := kms.Calls(fakekms.OpDecrypt)
	if _, err := s.CompleteWithReason(ctx, stranger.ID, c.Lease.JobID, c.Lease, domain.OutcomeFailed, 1, "boom"); err == nil {
		t.Fatal("another runner completed the job")
	}
	sum := protocol.TestSummary{Tests: 1, Failed: 1, Failures: []protocol.TestFailure{{Name: "T", Kind: "failure", Message: "m"}}}
	if err := s.SetReport(ctx, stranger.ID, c.Lease.JobID, c.Lease, sum); err == nil {
		t.Fatal("another runner stored the job's report")
	}
	if n := kms.Calls(fakekms.OpDecrypt) - before; n != 0 {
		t.Fatalf("KMS asked %d times for another runner's calls", n)
	}
	if _, err := s.CompleteWithReason(ctx, r.ID, c.Lease.JobID, c.Lease, domain.OutcomeFailed, 1, "login with deploy-value failed"); err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := s.Pool().QueryRow(ctx, `SELECT reason FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&reason); err != nil ||
		strings.Contains(reason, "deploy-value") || !strings.HasPrefix(reason, "login with ") {
		t.Fatalf("the holder's reason stored as %q (%v)", reason, err)
	}
	if kms.Calls(fakekms.OpDecrypt) == before {
		t.Fatal("the holder's reason was masked without the job's secrets")
	}
}
