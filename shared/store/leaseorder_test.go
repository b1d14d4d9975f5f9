package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// TestHeartbeatNeverShortensTheLease: a heartbeat whose statement began
// (its now()) before another extension committed, and waited for the row,
// leaves the later expiry: a lease only moves later, since the runner that
// got the later one counts on it. The chaos audit caught an extension that
// went back.
func TestHeartbeatNeverShortensTheLease(t *testing.T) {
	ctx := context.Background()
	s, r, _ := newRun(t, []store.NewJob{{Name: "a"}})
	c := claimAll(t, s, r)["a"]
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, c.Lease.JobID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Heartbeat(ctx, r.ID, c.Lease.JobID, c.Lease)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the heartbeat's statement has begun, and waits for the row
	var later time.Time
	if err := tx.QueryRow(ctx, `UPDATE jobs SET lease_expires_at = now() + interval '10 minutes' WHERE id = $1
		RETURNING lease_expires_at`, c.Lease.JobID).Scan(&later); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT lease_expires_at FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now.Before(later) {
		t.Fatalf("the heartbeat took the lease back from %s to %s", later, now)
	}
}
