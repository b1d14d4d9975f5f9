package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// TestDuplicateClaimLeavesTheRunningJobAlone: a claim that names the
// generation of a job already running on another slot (a bad or hostile
// server's answer) is refused (a later one is taken: generation_test.go);
// one of its lease that got as far as the workspace fails before a step,
// and its clean-up removes nothing of the job running there.
func TestDuplicateClaimLeavesTheRunningJobAlone(t *testing.T) {
	iso, err := isolate.New(isolate.Config{Mode: isolate.None}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer iso.Close()
	work := t.TempDir()
	l := domain.Lease{RunID: "run-1", JobID: "job-1", LeaseID: "lease-1"}
	running, err := iso.NewBox(0, filepath.Join(work, l.RunID, l.JobID, l.LeaseID), isolate.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	mine := filepath.Join(running.Workspace(), "build.log")
	if err := os.WriteFile(mine, []byte("running"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := New(Config{WorkDir: work, Isolation: iso, Client: client.New("http://127.0.0.1:9", "t")})
	// The runner refuses a second claim of a job it runs.
	claim := &protocol.Claim{Lease: l, Job: domain.ClaimedJob{Name: "j", TimeoutSeconds: 60}}
	first, done := a.newJob(claim)
	if first == nil {
		t.Fatal("the first claim of the job was refused")
	}
	if again, _ := a.newJob(claim); again != nil {
		t.Fatal("a second claim of a job running here was taken")
	}
	done()
	// Should one get past that, its clean-up removes nothing of the other.
	dup := &job{a: a, claim: &protocol.Claim{Lease: l}}
	if err := dup.prepare(1); err == nil || !strings.Contains(err.Error(), "no step was run") {
		t.Fatalf("a claim of a lease running here: %v", err)
	}
	dup.cleanUp(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("the running job's workspace after the duplicate's clean-up: %v", err)
	}
}
