package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
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
// cancels that job, so it needs the job's row, which the commit takes
// first. Had the creation held the quota's lock before the job's row, the
// two would deadlock and PostgreSQL would fail one of them.
func TestRunCreationBesideACommit(t *testing.T) { creationBesideCommit(t, false) }

// waitForLockWaiters returns once n sessions wait for a lock.
func waitForLockWaiters(t *testing.T, s *store.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
	}
	t.Fatalf("fewer than %d sessions waited for a lock", n)
}

// TestRunCreationBesideACommitOfItsSnapshot: a job commits an artifact of
// the very bytes of a new run's snapshot (its workspace unchanged) while
// that run, of its concurrency group, is made and cancels the job. The
// creation registers the snapshot only after it has locked the job's row,
// as the commit takes the row before the blob's key: had it taken the key
// first, the two would deadlock and PostgreSQL would fail one of them.
func TestRunCreationBesideACommitOfItsSnapshot(t *testing.T) { creationBesideCommit(t, true) }

// creationBesideCommit makes a run of a concurrency group that cancels a
// running job, holding the creation in the S3 check of its snapshot,
// while that job commits an artifact (of the snapshot's very bytes, when
// same); the other of the two then waits for a lock the first holds, and
// both must succeed.
func creationBesideCommit(t *testing.T, same bool) {
	ctx := context.Background()
	e := newGCEnv(t)
	file := "concurrency: {group: g, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n"
	pipelineRun(t, e.s, store.NewRun{Project: "p", GitRef: "refs/heads/main"}, file)
	c := claimAll(t, e.s, e.runner)["a"]
	src := e.put(bytes.Repeat([]byte("s"), 100))
	art := src
	if !same {
		art = e.put(bytes.Repeat([]byte("a"), 100))
	}
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
	<-hold.entered // one of the two holds the snapshot's key and checks it in S3
	go func() {
		committed <- e.s.CommitArtifact(ctx, e.runner.ID, c.Lease.JobID, c.Lease, "dist", art.Digest, 100)
	}()
	waitForLockWaiters(t, e.s, 1) // the other waits for it
	close(hold.release)
	if err := <-created; err != nil {
		t.Errorf("the run's creation: %v", err)
	}
	if err := <-committed; err != nil {
		t.Errorf("the commit: %v", err)
	}
}

// TestRunArtifactLimitIsExact: two jobs of a run commit artifacts at once
// that together pass the run's limit; the second to be counted is refused.
func TestRunArtifactLimitIsExact(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{MaxRunArtifactBytes: 1000})
	objects := castest.New(t)
	s.SetObjects(objects)
	p := pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "a"}, {Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	claims := claimAll(t, s, r)
	holder, err := s.Pool().Begin(ctx) // the quota's lock, held until both commits wait
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(7420, hashtext($1))`, p.ID); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	for i, name := range []string{"a", "b"} {
		data := bytes.Repeat([]byte{byte('0' + i)}, 700)
		digest := sha256.Sum256(data)
		ref := store.BlobRef{ProjectID: p.ID, Trusted: true, Digest: "sha256:" + hex.EncodeToString(digest[:])}
		if err := objects.Put(ctx, ref.Key(), ref.Digest, bytes.NewReader(data), 700); err != nil {
			t.Fatal(err)
		}
		l := claims[name].Lease
		go func() { results <- s.CommitArtifact(ctx, r.ID, l.JobID, l, "dist", ref.Digest, 700) }()
	}
	waitForLockWaiters(t, s, 2)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for range 2 {
		if err := <-results; domain.Is(err, domain.ETooLarge) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused != 1 {
		t.Errorf("%d of two 700-byte commits refused under a run limit of 1000, want 1", refused)
	}
}
