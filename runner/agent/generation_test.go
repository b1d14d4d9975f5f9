package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

func claimOf(gen int, lease string) *protocol.Claim {
	return &protocol.Claim{Lease: domain.Lease{RunID: "run-1", JobID: "job-1", RunnerID: "runner-1", LeaseID: lease, Generation: gen},
		Job: domain.ClaimedJob{Name: "j", TimeoutSeconds: 60}}
}

// TestLaterGenerationIsTaken: a retry of a job that another slot claims
// while the earlier attempt is still here (completed, before its
// clean-up; or not yet aware its lease ended) is run, and the earlier
// attempt's lease is lost if it had not ended; that attempt's clean-up
// leaves the later one in the runner's list. The same or an earlier
// generation is still refused.
func TestLaterGenerationIsTaken(t *testing.T) {
	a := New(Config{WorkDir: t.TempDir(), Client: client.New("http://127.0.0.1:9", "t")})
	first, doneFirst := a.newJob(claimOf(1, "lease-1"))
	if first == nil {
		t.Fatal("generation 1 was refused")
	}
	second, doneSecond := a.newJob(claimOf(2, "lease-2"))
	if second == nil {
		t.Fatal("generation 2, claimed while generation 1 was here, was refused")
	}
	if !first.lease.Lost() || !errors.Is(context.Cause(first.ctx), client.ErrLeaseLost) {
		t.Fatalf("generation 1 goes on: lost %v, cause %v", first.lease.Lost(), context.Cause(first.ctx))
	}
	if second.ctx.Err() != nil {
		t.Fatalf("generation 2 ended: %v", context.Cause(second.ctx))
	}
	otherRun := claimOf(3, "lease-o")
	otherRun.Lease.RunID = "run-2"
	for _, c := range []*protocol.Claim{claimOf(1, "lease-1"), claimOf(2, "lease-2"), claimOf(2, "lease-x"), otherRun} {
		if j, _ := a.newJob(c); j != nil {
			t.Fatalf("generation %d (%s, %s) taken while generation 2 runs", c.Lease.Generation, c.Lease.RunID, c.Lease.LeaseID)
		}
	}
	doneSecond() // generation 2 ends first: generation 1 is still cleaning up
	if j, _ := a.newJob(claimOf(1, "lease-1")); j != nil {
		t.Fatal("generation 1 claimed again while its attempt was still here")
	}
	third, doneThird := a.newJob(claimOf(3, "lease-3"))
	if third == nil {
		t.Fatal("generation 3 refused")
	}
	doneFirst() // generation 1's clean-up ends
	a.Abort()
	if !errors.Is(context.Cause(third.ctx), ErrRunnerStopping) {
		t.Fatalf("generation 3 left the runner's list with generation 1's clean-up: Abort did not reach it (%v)", context.Cause(third.ctx))
	}
	doneThird()
	if j, done := a.newJob(claimOf(4, "lease-4")); j == nil {
		t.Fatal("generation 4 refused after the others left")
	} else {
		done()
	}
	if len(a.running) != 0 {
		t.Fatalf("the runner's list holds %v after every attempt's clean-up", a.running)
	}
}

// TestLaterGenerationLeavesACompletedLeaseAlone: an earlier attempt whose
// completion was accepted (the retry case: it failed, the job was queued
// again at once) is not made lost by the later generation's claim.
func TestLaterGenerationLeavesACompletedLeaseAlone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"state":"RUNNING","job_state":"QUEUED"}`))
	}))
	defer srv.Close()
	a := New(Config{WorkDir: t.TempDir(), Client: client.New(srv.URL, "t")})
	first, doneFirst := a.newJob(claimOf(1, "lease-1"))
	defer doneFirst()
	if err := first.lease.Complete(context.Background(), domain.OutcomeFailed, 3, ""); err != nil {
		t.Fatal(err)
	}
	second, doneSecond := a.newJob(claimOf(2, "lease-2"))
	if second == nil {
		t.Fatal("generation 2 was refused")
	}
	defer doneSecond()
	if first.lease.Lost() || !errors.Is(context.Cause(first.lease.Context()), client.ErrCompleted) {
		t.Fatalf("a completed lease: lost %v, cause %v", first.lease.Lost(), context.Cause(first.lease.Context()))
	}
}
