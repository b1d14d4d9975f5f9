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
	base, err := openScaleDB(ctx, admin, "bench_scale_base")
	if err != nil {
		return nil, err
	}
	defer base.Close()
	big, err := openScaleDB(ctx, admin, "bench_scale_big")
	if err != nil {
		return nil, err
	}
	defer big.Close()
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
		if err := seedQueued(ctx, base.Pool, scaleBaseQueued); err != nil {
			return nil, err
		}
		if err := seedQueued(ctx, big.Pool, sc.queued); err != nil {
			return nil, err
		}
		if sc.finished > 0 {
			if err := seedFinished(ctx, big.Pool, sc.finished); err != nil {
				return nil, err
			}
		}
		ours, theirs, err := claimTurns(ctx, big, base)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row{name: sc.name + " (p50)", figure: median(ours), baseline: median(theirs), unit: "ms",
			goal: 1 / 1.5, baselineName: "1,000 queued"})
	}
	return rows, nil
}

// scaleDB is a benchmark database with its runner.
type scaleDB struct {
	*benchDB
	runner store.Runner
}

func openScaleDB(ctx context.Context, admin, name string) (*scaleDB, error) {
	db, err := openDB(ctx, admin, name, 4)
	if err != nil {
		return nil, err
	}
	r, err := seedRunner(ctx, db.Pool)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &scaleDB{benchDB: db, runner: r}, nil
}

// claim times one claim.
func (db *scaleDB) claim(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	c, err := db.Store.Claim(ctx, db.runner, nil, 0)
	if err == nil && c == nil {
		err = fmt.Errorf("queue ran dry")
	}
	return time.Since(start), err
}

// claimTurns warms both databases, then claims from each in turn,
// swapping which goes first, and returns the latencies in ms.
func claimTurns(ctx context.Context, big, base *scaleDB) (ours, theirs []float64, err error) {
	for range 20 { // plans, caches
		if _, err := base.claim(ctx); err != nil {
			return nil, nil, err
		}
		if _, err := big.claim(ctx); err != nil {
			return nil, nil, err
		}
	}
	for i := range scaleSamples {
		first, second := big, base
		if i%2 == 1 {
			first, second = base, big
		}
		a, err := first.claim(ctx)
		if err != nil {
			return nil, nil, err
		}
		b, err := second.claim(ctx)
		if err != nil {
			return nil, nil, err
		}
		if i%2 == 1 {
			a, b = b, a
		}
		ours = append(ours, a.Seconds()*1000)
		theirs = append(theirs, b.Seconds()*1000)
	}
	return ours, theirs, nil
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
