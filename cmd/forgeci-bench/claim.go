package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/store"
)

// rawClaimSQL is the baseline: the plainest SKIP LOCKED queue pop there is,
// with none of ForgeCI's work (no labels, no attempt row, no run state).
const rawClaimSQL = `
UPDATE jobs SET state = 'RUNNING', runner_id = $1, lease_id = gen_random_uuid(),
       generation = generation + 1, lease_expires_at = now() + interval '60 seconds', started_at = now()
WHERE id = (SELECT id FROM jobs WHERE state = 'QUEUED' ORDER BY queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id`

const claimJobs = 20000

// benchClaim: claims per second through store.Claim (the fenced claim: one
// statement that also writes the attempt and moves the run) beside the raw
// UPDATE, with 4 and 16 concurrent clients, on the same database.
func benchClaim(ctx context.Context, admin string, rounds int) ([]row, error) {
	db, err := openDB(ctx, admin, "bench_claim", 32)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	pool := db.Pool
	st := db.Store
	runner, err := seedRunner(ctx, pool)
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, clients := range []int{4, 16} {
		var fenced, raw []float64
		for round := range rounds {
			// Alternate which goes first so that warm-up favours neither.
			for _, which := range order(round) {
				if err := seedQueued(ctx, pool, claimJobs); err != nil {
					return nil, err
				}
				start := time.Now()
				n, err := drain(clients, func() (bool, error) {
					if which == "fenced" {
						c, err := st.Claim(ctx, runner, nil, 0)
						return c != nil, err
					}
					var id string
					err := pool.QueryRow(ctx, rawClaimSQL, runner.ID).Scan(&id)
					if err != nil && err.Error() == "no rows in result set" {
						return false, nil
					}
					return err == nil, err
				})
				if err != nil {
					return nil, err
				}
				if n != claimJobs {
					return nil, fmt.Errorf("%s claimed %d of %d jobs", which, n, claimJobs)
				}
				rate := perSecond(n, time.Since(start))
				if which == "fenced" {
					fenced = append(fenced, rate)
				} else {
					raw = append(raw, rate)
				}
			}
		}
		rows = append(rows, row{name: fmt.Sprintf("claim, %d clients", clients), figure: median(fenced),
			baseline: median(raw), unit: "claims/s", higherIsBetter: true, goal: 0.7,
			baselineName: "raw SKIP LOCKED UPDATE"})
	}
	return rows, nil
}

// drain runs clients goroutines calling op until it reports no more work.
func drain(clients int, op func() (bool, error)) (int, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	var firstErr error
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for {
				ok, err := op()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					break
				}
				if !ok {
					break
				}
				n++
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total, firstErr
}

// seedRunner registers the runner every claiming benchmark claims as.
func seedRunner(ctx context.Context, pool *pgxpool.Pool) (store.Runner, error) {
	r := store.Runner{ID: "bench-runner", Labels: []string{"linux"}}
	_, err := pool.Exec(ctx, `INSERT INTO runners (id, name, token_hash, labels)
		VALUES ($1, 'bench', sha256('bench'::bytea), '{linux}')`, r.ID)
	return r, err
}

// seedQueued empties the job tables and queues n jobs in runs of 500.
func seedQueued(ctx context.Context, pool *pgxpool.Pool, n int) error {
	return seedQueuedRuns(ctx, pool, n, 500)
}

// seedQueuedRuns empties the job tables and queues n jobs in runs of perRun.
func seedQueuedRuns(ctx context.Context, pool *pgxpool.Pool, n, perRun int) error {
	for _, q := range []string{
		`TRUNCATE log_chunks, job_attempts, artifacts, pending_caches, jobs, runs, projects CASCADE`,
		`INSERT INTO projects (id, name) VALUES ('p', 'bench')`,
		// Runs a member started from a snapshot they submitted, as from
		// the CLI: the claim checks both may still start trusted runs, and
		// that the token the snapshot was submitted with is not revoked.
		`INSERT INTO users (id, name, role) VALUES ('bench', 'bench', 'user') ON CONFLICT DO NOTHING`,
		`INSERT INTO project_members (project_id, user_id, role, secrets) VALUES ('p', 'bench', 'write', true)`,
		`INSERT INTO user_tokens (id, user_id, token_hash) VALUES ('bench', 'bench', sha256('bench'::bytea)) ON CONFLICT DO NOTHING`,
		`INSERT INTO runs (id, project_id, number, actor, source_by, source_token)
		 SELECT 'run-' || r, 'p', r, 'user:bench', 'user:bench', 'bench' FROM generate_series(0, (` + fmt.Sprint(n) + ` - 1) / ` + fmt.Sprint(perRun) + `) r`,
		`INSERT INTO jobs (id, run_id, name, state, labels, spec, queued_at, project_id, trusted)
		 SELECT 'job-' || i, 'run-' || (i / ` + fmt.Sprint(perRun) + `), 'j' || i, 'QUEUED', '{linux}',
		        jsonb_build_object('id', 'job-' || i, 'run_id', 'run-' || (i / ` + fmt.Sprint(perRun) + `), 'name', 'j' || i, 'needs', '{}'::text[],
		                           'timeout_seconds', 3600, 'steps', '[{"name":"s","run":"true"}]'::jsonb),
		        now() + i * interval '1 microsecond', 'p', true
		 FROM generate_series(0, ` + fmt.Sprint(n) + ` - 1) i`,
		`VACUUM ANALYZE jobs`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

func order(round int) []string {
	if round%2 == 0 {
		return []string{"fenced", "raw"}
	}
	return []string{"raw", "fenced"}
}
