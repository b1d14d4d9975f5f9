package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/domain"
)

const (
	xminClients = 16
	xminWindow  = 10 * time.Second
	xminLast    = 3 // windows at the end of the pinned phase reported apart
)

// Durations of the pinned-xmin benchmark (flags).
var (
	xminClean  = 60 * time.Second
	xminPinned = 3 * time.Minute
	xminRaw    = false
)

// benchPinnedXmin: claim throughput while a transaction holds its snapshot
// open (a REPEATABLE READ report, a stuck session, pg_dump): PostgreSQL
// then cannot remove any row version made after the snapshot, so every
// claimed job leaves a dead entry at the head of the queue's index that
// later claims must step over. xminClients clients each loop claim ->
// complete on a queue kept topped up with runs of 10 jobs; the clean phase
// (no old snapshot) is the baseline, then the snapshot is held for
// xminPinned. Reported: the pinned phase's mean and its last 30 seconds
// (where the dead entries are most), each against the clean phase's mean.
func benchPinnedXmin(ctx context.Context, admin string, _ int) ([]row, error) {
	kinds := []string{"fenced"}
	if xminRaw {
		kinds = append(kinds, "raw")
	}
	var rows []row
	for _, kind := range kinds {
		clean, mean, last, err := pinnedRun(ctx, admin, kind)
		if err != nil {
			return nil, err
		}
		name := "claim+complete"
		if kind == "raw" {
			name = "raw SKIP LOCKED UPDATE"
		}
		goal := 0.9
		if kind == "raw" {
			goal = 0 // shown for comparison only
		}
		rows = append(rows,
			row{name: fmt.Sprintf("%s, snapshot held %s (mean)", name, xminPinned), figure: mean, baseline: clean,
				unit: "claims/s", higherIsBetter: true, goal: goal, baselineName: "same, no old snapshot"},
			row{name: fmt.Sprintf("%s, snapshot held: last %s", name, xminLast*xminWindow), figure: last, baseline: clean,
				unit: "claims/s", higherIsBetter: true, goal: goal, baselineName: "same, no old snapshot"})
	}
	return rows, nil
}

func pinnedRun(ctx context.Context, admin, kind string) (clean, mean, last float64, err error) {
	db, err := openDB(ctx, admin, "bench_xmin", xminClients+4)
	if err != nil {
		return 0, 0, 0, err
	}
	defer db.Close()
	pool := db.Pool
	st := db.Store
	runner, err := seedRunner(ctx, pool)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := seedQueuedRuns(ctx, pool, 50000, 10); err != nil {
		return 0, 0, 0, err
	}

	var claimed atomic.Int64
	seeded := int64(50000)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil && wctx.Err() == nil {
			first = err
		}
		mu.Unlock()
		stop()
	}
	// The producer keeps at least 20,000 jobs queued.
	wg.Add(1)
	go func() {
		defer wg.Done()
		batch := 0
		for wctx.Err() == nil {
			if seeded-claimed.Load() > 20000 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			batch++
			if err := addQueued(wctx, pool, batch, 20000); err != nil {
				fail(err)
				return
			}
			seeded += 20000
		}
	}()
	for range xminClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				if kind == "raw" {
					var id string
					if err := pool.QueryRow(wctx, rawClaimSQL, runner.ID).Scan(&id); err != nil {
						fail(err)
						return
					}
					if _, err := pool.Exec(wctx, `UPDATE jobs SET state = 'PASSED', finished_at = now() WHERE id = $1`, id); err != nil {
						fail(err)
						return
					}
					claimed.Add(1)
					continue
				}
				c, err := st.Claim(wctx, runner, nil, 0)
				if err != nil || c == nil {
					fail(fmt.Errorf("claim: %v (claimed %v)", err, c != nil))
					return
				}
				if _, err := st.Complete(wctx, runner.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0); err != nil {
					fail(err)
					return
				}
				claimed.Add(1)
			}
		}()
	}
	measure := func(d time.Duration, label string) ([]float64, error) {
		var rates []float64
		for end := time.Now().Add(d); time.Now().Before(end); {
			n0, t0 := claimed.Load(), time.Now()
			select {
			case <-wctx.Done():
				return nil, first
			case <-time.After(xminWindow):
			}
			rate := perSecond(int(claimed.Load()-n0), time.Since(t0))
			rates = append(rates, rate)
			fmt.Fprintf(os.Stderr, "  %s %s: %.0f claims/s\n", kind, label, rate)
		}
		return rates, nil
	}
	time.Sleep(5 * time.Second) // warm up
	cleanRates, err := measure(xminClean, "clean")
	if err != nil {
		return 0, 0, 0, err
	}
	// The old snapshot: a REPEATABLE READ transaction that has read once.
	holder, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		return 0, 0, 0, err
	}
	defer holder.Close(ctx)
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, 0, 0, err
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&n); err != nil {
		return 0, 0, 0, err
	}
	pinnedRates, err := measure(xminPinned, "snapshot held")
	_ = tx.Rollback(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	stop()
	wg.Wait()
	avg := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	return avg(cleanRates), avg(pinnedRates), avg(pinnedRates[max(0, len(pinnedRates)-xminLast):]), nil
}

// addQueued queues n more jobs in runs of 10 without touching what is there.
func addQueued(ctx context.Context, pool *pgxpool.Pool, batch, n int) error {
	_, err := pool.Exec(ctx, `
		WITH r AS (
		    INSERT INTO runs (id, project_id, number)
		    SELECT 'b' || $1::int || '-run-' || r, 'p', $1::bigint * 1000000 + r FROM generate_series(0, ($2::int - 1) / 10) r
		)
		INSERT INTO jobs (id, run_id, name, state, labels, spec, queued_at, project_id, trusted)
		SELECT 'b' || $1::int || '-job-' || i, 'b' || $1::int || '-run-' || (i / 10), 'j' || i, 'QUEUED', '{linux}',
		       jsonb_build_object('id', 'b' || $1::int || '-job-' || i, 'name', 'j' || i, 'needs', '{}'::text[],
		                          'timeout_seconds', 3600, 'steps', '[{"name":"s","run":"true"}]'::jsonb),
		       now() + i * interval '1 microsecond', 'p', true
		FROM generate_series(0, $2::int - 1) i`, batch, n)
	if err != nil {
		return fmt.Errorf("top up the queue: %w", err)
	}
	return nil
}
