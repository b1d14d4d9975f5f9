package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

func claimOf(gen int, lease string) *protocol.Claim {
	return &protocol.Claim{Lease: domain.Lease{RunID: "run-1", JobID: "job-1", LeaseID: lease, Generation: gen},
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
	for _, c := range []*protocol.Claim{claimOf(1, "lease-1"), claimOf(2, "lease-2"), claimOf(2, "lease-x")} {
		if j, _ := a.newJob(c); j != nil {
			t.Fatalf("generation %d (%s) taken while generation 2 runs", c.Lease.Generation, c.Lease.LeaseID)
		}
	}
	doneFirst() // generation 1's clean-up ends
	a.Abort()
	if !errors.Is(context.Cause(second.ctx), ErrRunnerStopping) {
		t.Fatalf("generation 2 left the runner's list with generation 1's clean-up: Abort did not reach it (%v)", context.Cause(second.ctx))
	}
	doneSecond()
	if j, done := a.newJob(claimOf(3, "lease-3")); j == nil {
		t.Fatal("generation 3 refused after the others left")
	} else {
		done()
	}
}

// TestLaterGenerationLeavesAnEndedLeaseAlone: an earlier attempt whose
// lease had already ended (it completed) is not marked lost.
func TestLaterGenerationLeavesAnEndedLeaseAlone(t *testing.T) {
	a := New(Config{WorkDir: t.TempDir(), Client: client.New("http://127.0.0.1:9", "t")})
	first, doneFirst := a.newJob(claimOf(1, "lease-1"))
	defer doneFirst()
	first.lease.Abandon(errors.New("reported"))
	second, doneSecond := a.newJob(claimOf(2, "lease-2"))
	if second == nil {
		t.Fatal("generation 2 was refused")
	}
	defer doneSecond()
	if first.lease.Lost() {
		t.Fatal("an ended lease was marked lost")
	}
}
