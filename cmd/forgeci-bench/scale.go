package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/store"
)

const (
	scaleBaseQueued = 1000
	scaleSamples    = 500
)

// benchClaimScale: the latency of one claim (one client, one job at a
// time) with 10,000 and 100,000 jobs queued, and with 1,000,000 finished
// jobs (and their attempt rows) in the table beside 1,000 queued ones. The
// baseline is a second database holding only 1,000 queued jobs, claimed
// from in turn with the large one, so that both see the same machine at the
// same moment. Flat means within 1.5x: ratio >= 0.67.
func benchClaimScale(ctx context.Context, admin string, _ int) ([]row, error) {
	open := func(name string) (*pgxpool.Pool, func(), error) {
		db, err := openDB(ctx, admin, name, 4)
		if err != nil {
			return nil, nil, err
		}
		return db.Pool, db.Close, nil
	}
	basePool, closeBase, err := open("bench_scale_base")
	if err != nil {
		return nil, err
	}
	defer closeBase()
	bigPool, closeBig, err := open("bench_scale_big")
	if err != nil {
		return nil, err
	}
	defer closeBig()
	baseRunner, err := seedRunner(ctx, basePool)
	if err != nil {
		return nil, err
	}
	bigRunner, err := seedRunner(ctx, bigPool)
	if err != nil {
		return nil, err
	}
	base := store.New(basePool, store.Limits{})
	big := store.New(bigPool, store.Limits{})
	claim := func(st *store.Store, r store.Runner) (time.Duration, error) {
		start := time.Now()
		c, err := st.Claim(ctx, r, nil, 0)
		if err == nil && c == nil {
			err = fmt.Errorf("queue ran dry")
		}
		return time.Since(start), err
	}
	var rows []row
	for _, sc := range []struct {
		name             string
		queued, finished int
	}{
		{"claim latency, 10,000 queued", 10000, 0},
		{"claim latency, 100,000 queued", 100000, 0},
		{"claim latency, 1,000,000 finished + 1,000 queued", scaleBaseQueued, 1000000},
	} {
		fmt.Fprintf(os.Stderr, "  seeding %d queued, %d finished ...\n", sc.queued, sc.finished)
		if err := seedQueued(ctx, basePool, scaleBaseQueued); err != nil {
			return nil, err
		}
		if err := seedQueued(ctx, bigPool, sc.queued); err != nil {
			return nil, err
		}
		if sc.finished > 0 {
			if err := seedFinished(ctx, bigPool, sc.finished); err != nil {
				return nil, err
			}
		}
		// Warm both (plans, caches), then take turns.
		for range 20 {
			if _, err := claim(base, baseRunner); err != nil {
				return nil, err
			}
			if _, err := claim(big, bigRunner); err != nil {
				return nil, err
			}
		}
		var ours, theirs []float64
		for i := range scaleSamples {
			first, second := func() (time.Duration, error) { return claim(big, bigRunner) },
				func() (time.Duration, error) { return claim(base, baseRunner) }
			if i%2 == 1 {
				first, second = second, first
			}
			a, err := first()
			if err != nil {
				return nil, err
			}
			b, err := second()
			if err != nil {
				return nil, err
			}
			if i%2 == 1 {
				a, b = b, a
			}
			ours = append(ours, a.Seconds()*1000)
			theirs = append(theirs, b.Seconds()*1000)
		}
		rows = append(rows, row{name: sc.name + " (p50)", figure: median(ours), baseline: median(theirs), unit: "ms",
			goal: 1 / 1.5, baselineName: "1,000 queued"})
	}
	return rows, nil
}

// seedFinished adds n PASSED jobs in finished runs of 10, each with its
// attempt row, as a year of history would leave them.
func seedFinished(ctx context.Context, pool *pgxpool.Pool, n int) error {
	for _, q := range []string{
		`INSERT INTO runs (id, project_id, number, state, created_at, started_at, finished_at)
		 SELECT 'done-run-' || r, 'p', 1000000 + r, 'PASSED', now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
		 FROM generate_series(0, (` + fmt.Sprint(n) + ` - 1) / 10) r`,
		`INSERT INTO jobs (id, run_id, name, state, labels, spec, queued_at, project_id, trusted, runner_id, lease_id, generation,
		                   lease_expires_at, started_at, finished_at, exit_code, log_size)
		 SELECT 'done-' || i, 'done-run-' || (i / 10), 'j' || (i % 10), 'PASSED', '{linux}',
		        jsonb_build_object('id', 'done-' || i, 'name', 'j' || (i % 10), 'needs', '{}'::text[],
		                           'timeout_seconds', 3600, 'steps', '[{"name":"s","run":"true"}]'::jsonb),
		        now() - interval '1 day', 'p', true, 'bench-runner', gen_random_uuid(), 1,
		        now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', 0, 2048
		 FROM generate_series(0, ` + fmt.Sprint(n) + ` - 1) i`,
		`INSERT INTO job_attempts (job_id, generation, runner_id, lease_id, started_at, ended_at, outcome, exit_code, log_size)
		 SELECT id, generation, runner_id, lease_id, started_at, finished_at, 'PASSED', 0, log_size
		 FROM jobs WHERE state = 'PASSED'`,
		`VACUUM ANALYZE`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("seed finished: %w", err)
		}
	}
	return nil
}
