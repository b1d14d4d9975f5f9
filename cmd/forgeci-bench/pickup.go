package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/store"
)

// benchPickup: time from a job becoming QUEUED (CreateRun committed) to a
// waiting runner's long-poll claim returning it over HTTP, beside the round
// trip of one raw SKIP LOCKED claim statement on the same database.
func benchPickup(ctx context.Context, admin string, rounds int) ([]row, error) {
	stack, dropDB, err := benchStack(ctx, admin, "bench_pickup", "bench-pickup", 8)
	if err != nil {
		return nil, err
	}
	defer dropDB()
	defer stack.Close()
	st, pool := stack.Store, stack.Pool
	if _, err := st.CreateProject(ctx, "bench", "main"); err != nil {
		return nil, err
	}
	srv := httptest.NewServer(stack.Server(nil).Handler())
	defer srv.Close()
	reg, _, err := st.CreateRegistrationToken(ctx, time.Minute, "bench", store.Scope{Untrusted: true})
	if err != nil {
		return nil, err
	}
	runnerID, token, err := st.RegisterRunner(ctx, reg, "bench", nil)
	if err != nil {
		return nil, err
	}
	c := client.New(srv.URL, token)
	const samples = 200
	var pickup, raw []float64
	for i := range samples * max(1, rounds/3) {
		got := make(chan time.Time, 1)
		ready := make(chan struct{})
		go func() {
			close(ready)
			cl, err := c.Claim(ctx, nil, 10*time.Second)
			if err == nil && cl != nil {
				got <- time.Now()
			} else {
				got <- time.Time{}
			}
		}()
		<-ready
		time.Sleep(20 * time.Millisecond) // the claim is waiting
		if _, err := st.CreateRun(ctx, store.NewRun{Project: "bench", Jobs: []store.NewJob{{Name: fmt.Sprintf("j%d", i)}}}); err != nil {
			return nil, err
		}
		queued := time.Now()
		at := <-got
		if at.IsZero() {
			return nil, fmt.Errorf("pickup %d: no job claimed", i)
		}
		pickup = append(pickup, at.Sub(queued).Seconds()*1000)
		// Baseline: one raw claim statement's round trip, job already queued.
		if _, err := pool.Exec(ctx, `UPDATE jobs SET state = 'QUEUED', queued_at = now(), runner_id = NULL, lease_id = NULL, lease_expires_at = NULL, started_at = NULL WHERE name = $1`, fmt.Sprintf("j%d", i)); err != nil {
			return nil, err
		}
		start := time.Now()
		var id string
		if err := pool.QueryRow(ctx, rawClaimSQL, runnerID).Scan(&id); err != nil {
			return nil, fmt.Errorf("raw claim: %w", err)
		}
		raw = append(raw, time.Since(start).Seconds()*1000)
	}
	p := func(xs []float64, q float64) float64 {
		s := append([]float64{}, xs...)
		sort.Float64s(s)
		return s[int(q*float64(len(s)-1))]
	}
	return []row{
		{name: "pickup latency p50 (queued → claim returns)", figure: p(pickup, 0.5), baseline: p(raw, 0.5), unit: "ms",
			baselineName: "raw claim round trip", goal: 0},
		{name: "pickup latency p99", figure: p(pickup, 0.99), baseline: p(raw, 0.99), unit: "ms",
			baselineName: "raw claim round trip", goal: 0},
	}, nil
}
