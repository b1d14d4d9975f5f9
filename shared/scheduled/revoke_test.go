package scheduled_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/wake"
)

// A revoked runner's leases end at once: the sweeper, whose note was for
// their expiry a minute on, looks again and records the job ABORTED.
func TestRevocationWakesTheSweeper(t *testing.T) {
	f := newFixtureTTL(t, time.Minute)
	ctx := context.Background()
	c := f.claimSwept(t)
	// Wait for the passes to leave only notes of the lease's expiry: one
	// slot, or two when the expiry lies within the difference between two
	// passes' reading of it (the database's time turned into the board's
	// clock) of a slot's edge, as it did in loaded runs.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		notes, err := f.board.Notes(ctx, wake.Sweep)
		if err != nil {
			t.Fatal(err)
		}
		far := len(notes) > 0 && len(notes) <= 2
		for _, n := range notes {
			far = far && n.After(time.Now().Add(30*time.Second))
		}
		if far {
			break
		}
		if time.Now().After(deadline) {
			// Say what the sweeper saw: its notes against now, and the
			// lease's expiry by the database's clock.
			var expires time.Time
			var state string
			_ = f.st.Pool().QueryRow(ctx, `SELECT state, lease_expires_at FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&state, &expires)
			next, nerr := f.st.NextSweep(ctx)
			t.Fatalf("sweep notes %v (now %v); job %s, lease until %v; the next sweep by the store %v (%v)",
				notes, time.Now(), state, expires, next, nerr)
		}
	}
	revoked := time.Now()
	if err := f.st.RevokeRunner(ctx, f.runner.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := revoked.Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var state string
		if err := f.st.Pool().QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "ABORTED" {
			t.Logf("ABORTED %s after the revocation", time.Since(revoked).Round(time.Millisecond))
			return
		}
		if state != "RUNNING" || time.Now().After(deadline) {
			t.Fatalf("job %s %s after the revocation", state, time.Since(revoked))
		}
	}
}

// A runner holding a lease is revoked while every S3 write fails: the
// revocation commits all the same (a compromised runner must not wait
// for S3), and the sweeper still ends the lease, at its expiry.
func TestRevocationWhileS3Fails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.claimSwept(t)
	// Past the grain of the claim's note (a note of the same slot is not
	// written again).
	time.Sleep(f.board.Grain())
	f.board.Drop = func(string) bool { return true }
	if err := f.st.RevokeRunner(ctx, f.runner.ID); err != nil {
		t.Fatalf("revoke while S3 fails: %v", err)
	}
	if _, err := f.st.AuthenticateRunner(ctx, f.runnerToken); err == nil {
		t.Fatal("the runner still authenticates")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var state string
		if err := f.st.Pool().QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "ABORTED" {
			return
		}
		if state != "RUNNING" || time.Now().After(deadline) {
			t.Fatalf("job %s after the revocation", state)
		}
	}
}
