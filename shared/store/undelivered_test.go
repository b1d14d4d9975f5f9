package store_test

import (
	"context"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
	"github.com/forgeci/forgeci/shared/store"
)

// TestUndeliveredClaimIsNoRetry: a claim never delivered (KMS down: the
// job's secrets could not be opened) is recorded ABORTED, but ran nothing,
// so it does not use up the job's retry policy: a job with lease-lost: 1
// whose one real lease is then lost is queued again.
func TestUndeliveredClaimIsNoRetry(t *testing.T) {
	ctx := context.Background()
	s, kms, keys, r := secretJobStore(t, store.NewJob{Name: "j", Spec: secretSpec(), RetryLeaseLost: 1})
	// A container whose data keys are not cached claims while KMS is down.
	cold := coldStore(s, keys)
	kms.SetDown(true)
	if c, err := cold.Claim(ctx, r, nil, 0); domain.ErrorCode(err) != domain.EUnavailable || c != nil {
		t.Fatalf("claim with KMS down: %+v %v", c, err)
	}
	kms.SetDown(false)
	c, err := cold.Claim(ctx, r, nil, 0)
	if err != nil || c == nil || c.Lease.Generation != 2 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.Lease.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := s.Pool().QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&state); err != nil || state != domain.JobQueued {
		t.Fatalf("the first real lease lost, with lease-lost: 1, left the job %s (%v), not queued again", state, err)
	}
	// The retry is the policy's one: the next loss ends the job.
	if c, err = s.Claim(ctx, r, nil, 0); err != nil || c == nil {
		t.Fatalf("claim the retry: %v", err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.Lease.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&state); err != nil || state != domain.JobAborted {
		t.Fatalf("the second real lease lost left the job %s (%v), not ABORTED", state, err)
	}
}

// secretJobStore is a store whose secrets go through KMS, with project p,
// its secret DEPLOY_TOKEN, a runner, and a run of job (which names it).
func secretJobStore(t *testing.T, job store.NewJob) (*store.Store, *fakekms.KMS, secretbox.Keyring, store.Runner) {
	t.Helper()
	ctx := context.Background()
	s, kms, keys := kmsStore(t)
	p := pgtest.Project(t, s, "p")
	must(t, s.SetSecret(ctx, pgtest.Admin(t, s, "root"), p.ID, "DEPLOY_TOKEN", "deploy-value"))
	r := newRunner(t, s)
	if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{job}}); err != nil {
		t.Fatal(err)
	}
	return s, kms, keys, r
}

// coldStore is another container's store over s's database: its data
// keys are not cached.
func coldStore(s *store.Store, keys secretbox.Keyring) *store.Store {
	cold := store.New(s.Pool(), store.Limits{})
	cold.SetKeyring(keys)
	return cold
}
