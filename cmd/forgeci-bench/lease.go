package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// The raw baselines: the one-row statement a queue without fencing would
// run for the same effect, keyed by the job ID alone.
const (
	rawHeartbeatSQL = `UPDATE jobs SET lease_expires_at = now() + interval '60 seconds' WHERE id = $1`
	rawAppendSQL    = `INSERT INTO log_chunks (job_id, generation, start_offset, data) VALUES ($1, $2, $3, $4)`
)

const (
	leaseClients = 8
	// Many short turns, alternating, so that a neighbour's load on a shared
	// machine falls on both sides alike.
	leaseTurns    = 16
	leaseDuration = time.Second
	logChunk      = 1024
)

// benchLeaseWrites: fenced heartbeats and log appends per second (the store
// methods the heartbeat and logs routes call: the whole lease tuple checked
// against the locked row, in the transaction that writes) beside the raw
// single-row UPDATE and INSERT, with leaseClients clients each on its own
// RUNNING job, in alternating turns of leaseDuration.
func benchLeaseWrites(ctx context.Context, admin string, rounds int) ([]row, error) {
	db, err := openDB(ctx, admin, "bench_lease", 32)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	pool, st := db.Pool, db.Store
	runner, err := seedRunner(ctx, pool)
	if err != nil {
		return nil, err
	}
	// Every round claims fresh jobs, so that no round inherits another's
	// log sizes or row versions.
	leases := func() ([]domain.Lease, error) {
		if err := seedQueued(ctx, pool, leaseClients); err != nil {
			return nil, err
		}
		var out []domain.Lease
		for range leaseClients {
			c, err := st.Claim(ctx, runner, nil, 0)
			if err != nil || c == nil {
				return nil, fmt.Errorf("claim for the lease benchmark: %v", err)
			}
			out = append(out, c.Lease)
		}
		return out, nil
	}
	chunk := make([]byte, logChunk)
	_, _ = rand.Read(chunk)

	heartbeat := map[string]func(l domain.Lease, i int) error{
		"fenced": func(l domain.Lease, _ int) error {
			_, _, err := st.Heartbeat(ctx, runner.ID, l.JobID, l)
			return err
		},
		"raw": func(l domain.Lease, _ int) error {
			_, err := pool.Exec(ctx, rawHeartbeatSQL, l.JobID)
			return err
		},
	}
	appendLog := map[string]func(l domain.Lease, i int) error{
		"fenced": func(l domain.Lease, i int) error {
			_, err := st.AppendLog(ctx, runner.ID, l.JobID, l, int64(i)*logChunk, chunk)
			return err
		},
		"raw": func(l domain.Lease, i int) error {
			_, err := pool.Exec(ctx, rawAppendSQL, l.JobID, l.Generation, int64(i)*logChunk, chunk)
			return err
		},
	}
	var rows []row
	for _, b := range []struct {
		name, unit, baseline string
		ops                  map[string]func(l domain.Lease, i int) error
	}{
		{"heartbeat", "heartbeats/s", "raw one-row UPDATE", heartbeat},
		{"log append (1 KiB)", "appends/s", "raw INSERT of the chunk", appendLog},
	} {
		var fenced, raw []float64
		for round := range leaseTurns * max(1, rounds/3) {
			for _, which := range order(round) {
				ls, err := leases()
				if err != nil {
					return nil, err
				}
				rate, err := timed(ls, leaseDuration, b.ops[which])
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", which, b.name, err)
				}
				into := &raw
				if which == "fenced" {
					into = &fenced
				}
				*into = append(*into, rate)
			}
		}
		rows = append(rows, row{name: fmt.Sprintf("%s, %d clients", b.name, leaseClients), figure: median(fenced),
			baseline: median(raw), unit: b.unit, higherIsBetter: true, goal: 0.7, baselineName: b.baseline})
	}
	return rows, nil
}

// timed runs op in one goroutine per lease for d and returns calls per
// second; i counts each goroutine's calls from 0.
func timed(leases []domain.Lease, d time.Duration, op func(l domain.Lease, i int) error) (float64, error) {
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		mu    sync.Mutex
		first error
	)
	stop := time.Now().Add(d)
	start := time.Now()
	for _, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				if err := op(l, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	return perSecond(int(total.Load()), time.Since(start)), first
}
