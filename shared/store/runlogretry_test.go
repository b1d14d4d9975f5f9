package store_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRunLogLimitCountsRetriedAttempts: the logs of a run's attempts that
// a retry policy replaced count against its log limit (they are kept and
// readable): a job retried five times stored six attempts' logs, six
// times what the run may hold.
func TestRunLogLimitCountsRetriedAttempts(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{MaxLogBytes: 1000, MaxRunLogBytes: 1500})
	pgtest.Project(t, s, "p")
	reg, _, err := s.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := s.RegisterRunner(ctx, reg, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.AuthenticateRunner(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "a", RetryFailed: 5}}}); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for attempt := range 6 {
		c, err := s.Claim(ctx, r, nil, 0)
		if err != nil || c == nil {
			t.Fatalf("claim %d: %v", attempt, err)
		}
		for off := int64(0); off < 1000; off += 100 {
			_, err := s.AppendLog(ctx, r.ID, c.Lease.JobID, c.Lease, off, bytes.Repeat([]byte("x"), 100))
			if domain.ErrorCode(err) == domain.ETooLarge {
				refused++
				break
			}
			if err != nil {
				t.Fatalf("attempt %d at %d: %v", attempt, off, err)
			}
		}
		if _, err := s.Complete(ctx, r.ID, c.Lease.JobID, c.Lease, domain.OutcomeFailed, 1); err != nil {
			t.Fatal(err)
		}
	}
	var stored int
	if err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(length(data)), 0) FROM log_chunks`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 1500 || refused != 5 {
		t.Fatalf("the run stored %d bytes of logs, %d attempts refused; want its limit, 1500, and 5", stored, refused)
	}
}
