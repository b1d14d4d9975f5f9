package store_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRunLogLimitCountsEveryAttempt: a run's log limit holds over all its
// attempts, one after another: those a retry policy replaced (they are
// kept, and readable: a job retried five times stored six attempts'
// logs), and later jobs' first appends (each took a budget of its own
// before the run's logs were looked at).
func TestRunLogLimitCountsEveryAttempt(t *testing.T) {
	for name, jobs := range map[string][]store.NewJob{
		"retries":    {{Name: "a", RetryFailed: 5}},
		"later jobs": {{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}, {Name: "f"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, r := logLimitStore(t)
			if _, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", Jobs: jobs}); err != nil {
				t.Fatal(err)
			}
			stored, refused := logUntilRefused(t, s, r, 6)
			if stored != 1500 || refused != 5 {
				t.Fatalf("the run stored %d bytes of logs, %d attempts refused; want its limit, 1500, and 5", stored, refused)
			}
		})
	}
}

// logLimitStore is a store whose attempts may log 1000 bytes, and runs
// 1500, with project p and a runner.
func logLimitStore(t *testing.T) (*store.Store, store.Runner) {
	s := pgtest.NewStore(t, store.Limits{MaxLogBytes: 1000, MaxRunLogBytes: 1500})
	pgtest.Project(t, s, "p")
	return s, newRunner(t, s)
}

// logUntilRefused claims attempts one after another, each appending 100
// bytes at a time until its 1000 or a refusal as too large, then failing;
// it returns the log bytes stored and the attempts refused.
func logUntilRefused(t *testing.T, s *store.Store, r store.Runner, attempts int) (stored, refused int) {
	ctx := context.Background()
	for attempt := range attempts {
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
	if err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(length(data)), 0) FROM log_chunks`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	return stored, refused
}
