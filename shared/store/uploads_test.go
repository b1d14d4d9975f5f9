package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// An artifact or cache upload is recorded in the transaction that checks
// the lease: a lease that ends while the request waits for the job's row
// gets no upload row (and so no URL), and a refused request, such as a
// blob held at another size, changes nothing, not even the blob's
// touched_at.
func TestUploadRecordedUnderTheLease(t *testing.T) {
	ctx := context.Background()
	s, r, _ := newRun(t, []store.NewJob{{Name: "a"}, {Name: "b"}})
	digest := "sha256:" + strings.Repeat("ab", 32)
	uploads := func() int {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM uploads`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The lease ends while the upload waits for the job's row.
	c, _, err := s.ClaimScan(ctx, r, nil)
	if err != nil || c == nil {
		t.Fatalf("claim: %v", err)
	}
	lock, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck
	if _, err := lock.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, c.Lease.JobID); err != nil {
		t.Fatal(err)
	}
	for _, save := range []func() (store.Upload, error){
		func() (store.Upload, error) {
			return s.PrepareArtifactUpload(ctx, r.ID, c.Lease.JobID, c.Lease, digest, 10)
		},
		func() (store.Upload, error) {
			return s.PrepareCacheUpload(ctx, r.ID, c.Lease.JobID, c.Lease, "k", digest, 10)
		},
	} {
		done := make(chan error, 1)
		go func() { _, err := save(); done <- err }()
		waitForLockWait(t, s)
		if _, err := lock.Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.Lease.JobID); err != nil {
			t.Fatal(err)
		}
		if err := lock.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !domain.Is(err, domain.ELeaseExpired) {
			t.Fatalf("upload whose lease ended while it waited: %v", err)
		}
		if n := uploads(); n != 0 {
			t.Fatalf("%d uploads recorded for an ended lease", n)
		}
		// Again, with a fresh lock and a live lease.
		if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET lease_expires_at = now() + interval '1 minute' WHERE id = $1`, c.Lease.JobID); err != nil {
			t.Fatal(err)
		}
		if lock, err = s.Pool().Begin(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := lock.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, c.Lease.JobID); err != nil {
			t.Fatal(err)
		}
	}
	_ = lock.Rollback(ctx)

	// A blob held at another size: refused, untouched.
	up, err := s.PrepareArtifactUpload(ctx, r.ID, c.Lease.JobID, c.Lease, digest, 10)
	if err != nil || up.Held || uploads() != 1 {
		t.Fatalf("upload under a live lease: %+v %v, %d uploads", up, err, uploads())
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO blobs (project_id, trusted, digest, size, s3_key, touched_at)
		VALUES ($1, $2, $3, 20, $4, now() - interval '1 day')`, up.Ref.ProjectID, up.Ref.Trusted, digest, up.Ref.Key()); err != nil {
		t.Fatal(err)
	}
	touched := func() time.Time {
		var at time.Time
		if err := s.Pool().QueryRow(ctx, `SELECT touched_at FROM blobs WHERE digest = $1`, digest).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	before := touched()
	if _, err := s.PrepareArtifactUpload(ctx, r.ID, c.Lease.JobID, c.Lease, digest, 10); !domain.Is(err, domain.EInvalid) {
		t.Fatalf("a blob held at 20 bytes asked as 10: %v", err)
	}
	if !touched().Equal(before) {
		t.Fatal("a refused upload touched the blob")
	}
	if up, err := s.PrepareCacheUpload(ctx, r.ID, c.Lease.JobID, c.Lease, "k", digest, 20); err != nil || !up.Held || touched().Equal(before) {
		t.Fatalf("a held blob: %+v %v (touched %v, was %v)", up, err, touched(), before)
	}
}

// waitForLockWait returns once some session waits for a row lock.
func waitForLockWait(t *testing.T, s *store.Store) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if lockWaiting(t, s) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no session waited for the lock")
}

// lockWaiting is whether some session of the test's database waits for a
// lock.
func lockWaiting(t *testing.T, s *store.Store) bool {
	t.Helper()
	var waiting bool
	if err := s.Pool().QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	return waiting
}
