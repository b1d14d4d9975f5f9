package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// A claim whose statement started before a revocation committed, and
// commits after it (here held up on the run's row), must not leave the
// revoked runner a live lease: the claim holds the runner's row FOR
// SHARE, so the revocation waits for it and then ends its lease.
func TestRevokeRacesClaim(t *testing.T) {
	ctx := context.Background()
	s, r, run := newRun(t, []store.NewJob{{Name: "j"}})
	lock, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, run.ID); err != nil {
		t.Fatal(err)
	}
	type res struct {
		c   *store.Claim
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, _, err := s.ClaimScan(ctx, r, nil)
		done <- res{c, err}
	}()
	time.Sleep(300 * time.Millisecond) // the claim waits on the run
	revoked := make(chan error, 1)
	go func() { revoked <- s.RevokeRunner(ctx, r.ID) }()
	time.Sleep(300 * time.Millisecond)
	_ = lock.Rollback(ctx)
	if err := <-revoked; err != nil {
		t.Fatalf("revoke: %v", err)
	}
	got := <-done
	if got.c == nil {
		return // refused: as good
	}
	var live bool
	if err := s.Pool().QueryRow(ctx, `SELECT lease_expires_at > now() FROM jobs WHERE id = $1`, got.c.Lease.JobID).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live {
		t.Fatalf("revoked runner %s holds a live lease of job %s", r.ID, got.c.Lease.JobID)
	}
	if _, _, err := s.Heartbeat(ctx, r.ID, got.c.Lease.JobID, got.c.Lease); err == nil {
		t.Fatal("the revoked runner's heartbeat was accepted")
	}
}
