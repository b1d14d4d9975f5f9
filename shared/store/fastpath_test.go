package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

func claimOne(t *testing.T, s *store.Store, r store.Runner) domain.Lease {
	t.Helper()
	if _, err := s.CreateRun(context.Background(), store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "j"}}}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(context.Background(), r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	return c.Lease
}

func code(err error) string {
	var e *domain.Error
	if errors.As(err, &e) {
		return string(e.Code)
	}
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestFastPathsClassify: the one-statement heartbeat and log append accept
// exactly what the full lease check accepts, and when they match nothing
// the caller hears the same codes as before.
func TestFastPathsClassify(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{LeaseTTL: time.Minute, MaxLogBytes: 100})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	l := claimOne(t, s, r)

	if _, _, err := s.Heartbeat(ctx, r.ID, l.JobID, l); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AppendLog(ctx, r.ID, l.JobID, l, 0, []byte("hello ")); err != nil || n != 6 {
		t.Fatalf("append: %d %v", n, err)
	}
	if n, err := s.AppendLog(ctx, r.ID, l.JobID, l, 6, []byte("world")); err != nil || n != 11 {
		t.Fatalf("append: %d %v", n, err)
	}
	// A resend of stored bytes is a no-op; a gap or a different resend is 416.
	if n, err := s.AppendLog(ctx, r.ID, l.JobID, l, 0, []byte("hello ")); err != nil || n != 11 {
		t.Fatalf("resend: %d %v", n, err)
	}
	for _, off := range []int64{5, 12} {
		_, err := s.AppendLog(ctx, r.ID, l.JobID, l, off, []byte("x"))
		var e *domain.Error
		if !errors.As(err, &e) || e.Code != domain.EOffsetMismatch || e.NextOffset == nil || *e.NextOffset != 11 {
			t.Fatalf("append at %d: %v", off, err)
		}
	}
	if _, err := s.AppendLog(ctx, r.ID, l.JobID, l, 11, bytes.Repeat([]byte("x"), 90)); code(err) != string(domain.ETooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	// The heartbeat refreshes the displayed size.
	if _, _, err := s.Heartbeat(ctx, r.ID, l.JobID, l); err != nil {
		t.Fatal(err)
	}
	var size int64
	_ = s.Pool().QueryRow(ctx, `SELECT log_size FROM jobs WHERE id = $1`, l.JobID).Scan(&size)
	if size != 11 {
		t.Fatalf("log_size after heartbeat %d", size)
	}

	for name, bad := range map[string]func(domain.Lease) domain.Lease{
		"lease id":   func(x domain.Lease) domain.Lease { x.LeaseID = "00000000-0000-0000-0000-000000000000"; return x },
		"not a uuid": func(x domain.Lease) domain.Lease { x.LeaseID = "nope"; return x },
		"generation": func(x domain.Lease) domain.Lease { x.Generation++; return x },
		"run":        func(x domain.Lease) domain.Lease { x.RunID = "other"; return x },
	} {
		b := bad(l)
		if _, _, err := s.Heartbeat(ctx, r.ID, l.JobID, b); code(err) != string(domain.ELeaseMismatch) {
			t.Errorf("heartbeat with wrong %s: %v", name, err)
		}
		if _, err := s.AppendLog(ctx, r.ID, l.JobID, b, 11, []byte("!")); code(err) != string(domain.ELeaseMismatch) {
			t.Errorf("append with wrong %s: %v", name, err)
		}
	}
	other := newRunner(t, s)
	if _, _, err := s.Heartbeat(ctx, other.ID, l.JobID, l); code(err) != string(domain.ELeaseMismatch) {
		t.Errorf("heartbeat by another runner: %v", err)
	}

	expire(t, s, l.JobID)
	if _, _, err := s.Heartbeat(ctx, r.ID, l.JobID, l); code(err) != string(domain.ELeaseExpired) {
		t.Fatalf("heartbeat after expiry: %v", err)
	}
	if _, err := s.AppendLog(ctx, r.ID, l.JobID, l, 11, []byte("!")); code(err) != string(domain.ELeaseExpired) {
		t.Fatalf("append after expiry: %v", err)
	}

	l2 := claimOne(t, s, r)
	if err := s.RevokeRunner(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Heartbeat(ctx, r.ID, l2.JobID, l2); code(err) != string(domain.EUnauthorized) {
		t.Fatalf("heartbeat of a revoked runner: %v", err)
	}
	if _, err := s.AppendLog(ctx, r.ID, l2.JobID, l2, 0, []byte("!")); code(err) != string(domain.EUnauthorized) {
		t.Fatalf("append of a revoked runner: %v", err)
	}
}

// TestAppendRacesCompletion: appends in flight while the lease ends either
// land before the end (and count in the attempt's recorded size) or are
// refused; racing appends at one offset never both land. The log stays
// contiguous.
func TestAppendRacesCompletion(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{LeaseTTL: time.Minute})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	for round := range 20 {
		l := claimOne(t, s, r)
		var wg sync.WaitGroup
		var mu sync.Mutex
		accepted := map[int64]string{} // offset -> data of acknowledged appends
		for w := range 4 {
			wg.Go(func() {
				var off int64
				for i := 0; i < 50; i++ {
					data := fmt.Sprintf("w%d-%d;", w, i)
					next, err := s.AppendLog(ctx, r.ID, l.JobID, l, off, []byte(data))
					var e *domain.Error
					switch {
					case err == nil:
						mu.Lock()
						if prev, ok := accepted[off]; ok && prev != data {
							t.Errorf("two different appends acknowledged at offset %d", off)
						}
						accepted[off] = data
						mu.Unlock()
						off = next
					case errors.As(err, &e) && e.Code == domain.EOffsetMismatch:
						off = *e.NextOffset
					case errors.As(err, &e) && (e.Code == domain.EJobFinished || e.Code == domain.ELeaseMismatch):
						return
					default:
						t.Errorf("append: %v", err)
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if _, err := s.Complete(ctx, r.ID, l.JobID, l, domain.OutcomePassed, 0); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		var recorded int64
		if err := s.Pool().QueryRow(ctx, `SELECT log_size FROM job_attempts WHERE job_id = $1 AND generation = $2`,
			l.JobID, l.Generation).Scan(&recorded); err != nil {
			t.Fatal(err)
		}
		log, _, err := s.ReadLog(ctx, l.RunID, l.JobID, l.Generation, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(log)) != recorded {
			t.Fatalf("round %d: the attempt records %d log bytes, the log has %d", round, recorded, len(log))
		}
		for off, data := range accepted {
			if off+int64(len(data)) > recorded || string(log[off:off+int64(len(data))]) != data {
				t.Fatalf("round %d: acknowledged append at %d (%q) is not in the log", round, off, data)
			}
		}
	}
}

// TestClaimBehindHint: a job queued behind the position claims start from
// (its queueing transaction committed late) is still claimed, within about
// a second, and claims otherwise stay oldest first. The second is the
// store's clock's, which the test moves instead of waiting.
func TestClaimBehindHint(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{LeaseTTL: time.Minute})
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	s.SetClock(func() time.Time { return time.Unix(0, clock.Load()) })
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	run, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "a"}, {Name: "b"}, {Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Oldest first: a, b, c by (queued_at, id); make c the newest.
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET queued_at = queued_at + interval '1 second' WHERE id = $1`, run.JobIDs["c"]); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		c, err := s.Claim(ctx, r, nil, 0)
		if err != nil || c == nil {
			t.Fatal(c, err)
		}
		got = append(got, c.Lease.JobID)
	}
	if got[0] == run.JobIDs["c"] || got[1] == run.JobIDs["c"] {
		t.Fatalf("c claimed before an older job")
	}
	c, err := s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil || c.Lease.JobID != run.JobIDs["c"] {
		t.Fatalf("third claim: %v %v", c, err)
	}
	// Now a job appears behind the hint (c's position), as a late commit
	// would put it.
	late, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "late"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET queued_at = now() - interval '1 hour' WHERE id = $1`, late.JobIDs["late"]); err != nil {
		t.Fatal(err)
	}
	// Until a second has passed, claims scan from the hint only...
	clock.Add(int64(900 * time.Millisecond))
	if c, err := s.Claim(ctx, r, nil, 0); err != nil || c != nil {
		t.Fatalf("claimed before the scan from the head was due: %v %v", c, err)
	}
	// ...and once it has, the next claim finds the job behind the hint.
	clock.Add(int64(100 * time.Millisecond))
	c, err = s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil || c.Lease.JobID != late.JobIDs["late"] {
		t.Fatalf("the job behind the hint was not claimed a second later: %v %v", c, err)
	}
}

// TestRevokeRacesWrites: a runner revoked while it appends and heartbeats.
// Once RevokeRunner has returned, no write of the runner succeeds (the fast
// paths no longer read the runner's row: revocation ends its leases), and
// the sweeper records the job ABORTED.
func TestRevokeRacesWrites(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{LeaseTTL: time.Minute})
	pgtest.Project(t, s, "p")
	for round := range 10 {
		r := newRunner(t, s)
		l := claimOne(t, s, r)
		var revoked atomic.Bool
		var wg sync.WaitGroup
		var mu sync.Mutex
		var late []string
		for w := range 3 {
			wg.Go(func() {
				var off int64
				for i := 0; i < 200; i++ {
					after := revoked.Load()
					var err error
					if w == 0 {
						_, _, err = s.Heartbeat(ctx, r.ID, l.JobID, l)
					} else {
						var next int64
						if next, err = s.AppendLog(ctx, r.ID, l.JobID, l, off, []byte(fmt.Sprintf("w%d-%d;", w, i))); err == nil {
							off = next
						} else if e := (*domain.Error)(nil); errors.As(err, &e) && e.Code == domain.EOffsetMismatch {
							off, err = *e.NextOffset, nil
							continue
						}
					}
					if err == nil && after {
						mu.Lock()
						late = append(late, fmt.Sprintf("writer %d call %d", w, i))
						mu.Unlock()
					}
					if err != nil && after {
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		if err := s.RevokeRunner(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		revoked.Store(true)
		wg.Wait()
		if len(late) > 0 {
			t.Fatalf("round %d: %d writes accepted after the revocation returned, first %v", round, len(late), late[:min(5, len(late))])
		}
		if _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		var state string
		if err := s.Pool().QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, l.JobID).Scan(&state); err != nil || state != "ABORTED" {
			t.Fatalf("round %d: the revoked runner's job is %s (%v), not ABORTED", round, state, err)
		}
	}
}
