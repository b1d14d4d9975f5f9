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
	"github.com/forgeci/forgeci/shared/store"
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
	runner, err := seedRunner(ctx, db.Pool)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := seedQueuedRuns(ctx, db.Pool, 50000, 10); err != nil {
		return 0, 0, 0, err
	}
	l := &xminLoad{db: db, runner: runner, kind: kind, seeded: 50000}
	l.ctx, l.stop = context.WithCancel(ctx)
	defer l.stop()
	l.wg.Add(1)
	go l.produce()
	for range xminClients {
		l.wg.Add(1)
		go l.work()
	}
	time.Sleep(5 * time.Second) // warm up
	cleanRates, err := l.measure(xminClean, "clean")
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
	pinnedRates, err := l.measure(xminPinned, "snapshot held")
	_ = tx.Rollback(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	l.stop()
	l.wg.Wait()
	return average(cleanRates), average(pinnedRates), average(pinnedRates[max(0, len(pinnedRates)-xminLast):]), nil
}

// xminLoad is the claim-and-complete load of one pinned-xmin run: a
// producer keeps the queue full, clients claim and complete.
type xminLoad struct {
	db      *benchDB
	runner  store.Runner
	kind    string // "raw": the bare statements; else the store's
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	claimed atomic.Int64
	seeded  int64

	mu    sync.Mutex
	first error
}

func (l *xminLoad) fail(err error) {
	l.mu.Lock()
	if l.first == nil && l.ctx.Err() == nil {
		l.first = err
	}
	l.mu.Unlock()
	l.stop()
}

// produce keeps at least 20,000 jobs queued.
func (l *xminLoad) produce() {
	defer l.wg.Done()
	batch := 0
	for l.ctx.Err() == nil {
		if l.seeded-l.claimed.Load() > 20000 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		batch++
		if err := addQueued(l.ctx, l.db.Pool, batch, 20000); err != nil {
			l.fail(err)
			return
		}
		l.seeded += 20000
	}
}

// work claims and completes jobs until the load stops.
func (l *xminLoad) work() {
	defer l.wg.Done()
	for l.ctx.Err() == nil {
		if err := l.once(); err != nil {
			l.fail(err)
			return
		}
		l.claimed.Add(1)
	}
}

func (l *xminLoad) once() error {
	if l.kind == "raw" {
		var id string
		if err := l.db.Pool.QueryRow(l.ctx, rawClaimSQL, l.runner.ID).Scan(&id); err != nil {
			return err
		}
		_, err := l.db.Pool.Exec(l.ctx, `UPDATE jobs SET state = 'PASSED', finished_at = now() WHERE id = $1`, id)
		return err
	}
	c, err := l.db.Store.Claim(l.ctx, l.runner, nil, 0)
	if err != nil || c == nil {
		return fmt.Errorf("claim: %v (claimed %v)", err, c != nil)
	}
	_, err = l.db.Store.Complete(l.ctx, l.runner.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0)
	return err
}

// measure samples the claim rate every xminWindow for d.
func (l *xminLoad) measure(d time.Duration, label string) ([]float64, error) {
	var rates []float64
	for end := time.Now().Add(d); time.Now().Before(end); {
		n0, t0 := l.claimed.Load(), time.Now()
		select {
		case <-l.ctx.Done():
			l.mu.Lock()
			defer l.mu.Unlock()
			return nil, l.first
		case <-time.After(xminWindow):
		}
		rate := perSecond(int(l.claimed.Load()-n0), time.Since(t0))
		rates = append(rates, rate)
		fmt.Fprintf(os.Stderr, "  %s %s: %.0f claims/s\n", l.kind, label, rate)
	}
	return rates, nil
}

func average(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
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
