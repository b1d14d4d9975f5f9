package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// holdingChecks holds the S3 check of one key until release closes.
type holdingChecks struct {
	store.Objects
	key              string
	entered, release chan struct{}
}

func (h *holdingChecks) Check(ctx context.Context, key, digest string, size int64) error {
	if key == h.key {
		close(h.entered)
		select {
		case <-h.release:
		case <-time.After(10 * time.Second):
		}
	}
	return h.Objects.Check(ctx, key, digest, size)
}

// TestRunCreationBesideACommit: a run is made (registering its snapshot)
// while a job of its concurrency group commits an artifact; the new run
// cancels that job, so it needs the job's row, which the commit holds.
// Had the creation held the quota's lock, for which the commit waits, the
// two would deadlock and PostgreSQL would fail one of them.
func TestRunCreationBesideACommit(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	file := "concurrency: {group: g, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n"
	pipelineRun(t, e.s, store.NewRun{Project: "p", GitRef: "refs/heads/main"}, file)
	c := claimAll(t, e.s, e.runner)["a"]
	art := e.put(bytes.Repeat([]byte("a"), 100))
	src := e.put(bytes.Repeat([]byte("s"), 100))
	sum := sha256.Sum256([]byte("manifest"))
	hold := &holdingChecks{Objects: e.cas, key: src.Key(), entered: make(chan struct{}), release: make(chan struct{})}
	e.s.SetObjects(hold)
	created, committed := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := e.s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: "refs/heads/main", Jobs: []store.NewJob{{Name: "a"}},
			Concurrency: &domain.Concurrency{Group: "g", CancelInProgress: true},
			Source:      domain.Source{BlobDigest: src.Digest, ManifestDigest: "sha256:" + hex.EncodeToString(sum[:]), Size: 100}})
		created <- err
	}()
	<-hold.entered // the creation is registering its snapshot
	go func() {
		committed <- e.s.CommitArtifact(ctx, e.runner.ID, c.Lease.JobID, c.Lease, "dist", art.Digest, 100)
	}()
	time.Sleep(300 * time.Millisecond) // the commit holds its job's row, and registers
	close(hold.release)
	if err := <-created; err != nil {
		t.Fatalf("the run's creation: %v", err)
	}
	if err := <-committed; err != nil {
		t.Fatalf("the commit: %v", err)
	}
}
