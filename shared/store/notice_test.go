package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// Two deliveries for one commit (its push and its pull request) fail at
// the same moment: one notice is queued, not two. The repository's row is
// held so that both transactions are inside their insert together (its
// foreign-key check waits for the row); looking for a queued notice first
// found none in either, since neither had committed.
func TestConcurrentFailuresQueueOneNotice(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	addRepository(t, s, p.ID)
	sha := strings.Repeat("cd", 20)
	ds := []*store.Delivery{claimedDelivery(t, s, "push-1"), claimedDelivery(t, s, "pr-1")}

	hold, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck
	if _, err := hold.Exec(ctx, `SELECT 1 FROM scm_repositories WHERE github_id = 5 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, len(ds))
	for _, d := range ds {
		go func() { errs <- s.FailDeliveryWithNotice(ctx, d, errors.New("no .forgeci.yml"), sha, "forgeci") }()
	}
	waitForLockWaiters(t, s, 2)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range ds {
		if err := <-errs; err != nil {
			t.Fatalf("fail with notice: %v", err)
		}
	}
	var notices int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM check_runs WHERE head_sha = $1`, sha).Scan(&notices); err != nil {
		t.Fatal(err)
	}
	if notices != 1 {
		t.Fatalf("%d notices queued for one commit, want 1", notices)
	}
	var failed int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM scm_deliveries WHERE state = $1`, store.DeliveryFailed).Scan(&failed); err != nil || failed != 2 {
		t.Fatalf("%d deliveries failed (%v), want both", failed, err)
	}
}

// A check run given up while its job changed (the change bumped its
// version during the last push) stays due: the change was never sent.
func TestGivenUpCheckKeepsALaterChange(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	addRepository(t, s, p.ID)
	d := claimedDelivery(t, s, "gone-1")
	if err := s.FailDeliveryWithNotice(ctx, d, errors.New("no .forgeci.yml"), strings.Repeat("ef", 20), "forgeci"); err != nil {
		t.Fatal(err)
	}
	ws, err := s.ClaimChecks(ctx, 10, time.Minute)
	if err != nil || len(ws) != 1 {
		t.Fatalf("claim checks: %v %v", ws, err)
	}
	// What the bump trigger does when the job changes.
	if _, err := s.Pool().Exec(ctx, `UPDATE check_runs SET version = version + 1, attempts = 0, next_attempt_at = now()`); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckGivenUp(ctx, ws[0], 0, errors.New("given up after 16 refusals in a row: 404 Not Found")); err != nil {
		t.Fatal(err)
	}
	var due int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM check_runs WHERE version > pushed_version`).Scan(&due); err != nil || due != 1 {
		t.Fatalf("%d check runs due after a change during the last push (%v), want 1", due, err)
	}
	// A push that fails while the job changes: the change is due now, not
	// after the failure's wait.
	if ws, err = s.ClaimChecks(ctx, 10, time.Minute); err != nil || len(ws) != 1 {
		t.Fatalf("claim checks again: %v %v", ws, err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE check_runs SET version = version + 1, attempts = 0, gone_attempts = 0, next_attempt_at = now()`); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckFailed(ctx, ws[0], 0, errors.New("404 Not Found"), 6*time.Hour, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM check_runs WHERE version > pushed_version AND next_attempt_at <= now()`).Scan(&due); err != nil || due != 1 {
		t.Fatalf("%d check runs due now after a change during a failed push (%v), want 1", due, err)
	}
}

// claimedDelivery records a push delivery of repository 5 (addRepository)
// and claims it.
func claimedDelivery(t *testing.T, s *store.Store, guid string) *store.Delivery {
	t.Helper()
	ctx := context.Background()
	if _, err := s.RecordDelivery(ctx, guid, "push", 5, []byte(`{"n":"`+guid+`"}`)); err != nil {
		t.Fatal(err)
	}
	d, err := s.ClaimDelivery(ctx, time.Minute)
	if err != nil || d == nil || d.GUID != guid {
		t.Fatalf("claim %s: %v %v", guid, d, err)
	}
	return d
}
