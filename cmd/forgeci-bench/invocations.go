package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

const (
	invocationPool     = 20
	invocationDuration = 6 * time.Second
	// invocationTimeout is each invocation's deadline, as a Lambda
	// function's timeout would be: waiting longer than this for a pooled
	// connection counts as a connection error.
	invocationTimeout = 10 * time.Second
)

// benchInvocations: runner requests per second served by the real handlers
// (token check, JSON, store) when 200 invocations are in flight at once
// over one 20-connection pool (what RDS Proxy's connection limit leaves
// them), beside 20 invocations over the same pool. Each simulated runner
// loops claim, 3 x (heartbeat, 1 KiB log append), complete; every request
// is one invocation with its own deadline. Any 5xx, transport error or
// deadline is an error; the goal is a ratio >= 0.8 with none.
func benchInvocations(ctx context.Context, admin string, rounds int) ([]row, error) {
	db, err := openDB(ctx, admin, "bench_invocations", invocationPool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	pool := db.Pool
	st := db.Store
	h := (&api.Server{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	const most = 200
	tokens := make([]string, most)
	for i := range tokens {
		reg, _, err := st.CreateRegistrationToken(ctx, time.Minute, "bench", store.Scope{Untrusted: true})
		if err != nil {
			return nil, err
		}
		if _, tokens[i], err = st.RegisterRunner(ctx, reg, fmt.Sprintf("inv-%d", i), []string{"linux"}); err != nil {
			return nil, err
		}
	}
	var errorsSeen atomic.Int64
	invoke := func(token, path string, body any) (int, []byte) {
		ictx, cancel := context.WithTimeout(ctx, invocationTimeout)
		defer cancel()
		b, _ := json.Marshal(body)
		req := httptest.NewRequestWithContext(ictx, http.MethodPost, path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 || ictx.Err() != nil {
			errorsSeen.Add(1)
		}
		return rec.Code, rec.Body.Bytes()
	}
	chunk := bytes.Repeat([]byte("x"), logChunk)
	phase := func(n int) (float64, error) {
		// Runs of 10 jobs, as pipelines are; enough for the whole phase.
		if err := seedQueuedRuns(ctx, pool, 30000, 10); err != nil {
			return 0, err
		}
		var requests atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		stop := time.Now().Add(invocationDuration)
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func(token string) {
				defer wg.Done()
				fail := func(err error) {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
				for time.Now().Before(stop) {
					status, body := invoke(token, "/v1/runner/claim", map[string]any{"wait_seconds": 0})
					requests.Add(1)
					if status != http.StatusOK {
						if status == http.StatusNoContent {
							fail(fmt.Errorf("the queue ran dry"))
							return
						}
						continue
					}
					var c protocol.Claim
					if err := json.Unmarshal(body, &c); err != nil {
						fail(err)
						return
					}
					l := c.Lease
					l.ExpiresAt = nil
					path := "/v1/runner/jobs/" + l.JobID + "/"
					for k := range 3 {
						if status, body := invoke(token, path+"heartbeat", map[string]any{"lease": l}); status != 200 {
							fail(fmt.Errorf("heartbeat: %d %s", status, body))
						}
						if status, body := invoke(token, path+"logs", map[string]any{"lease": l, "offset": k * logChunk, "data": chunk}); status != 200 {
							fail(fmt.Errorf("logs: %d %s", status, body))
						}
						requests.Add(2)
					}
					if status, body := invoke(token, path+"complete", map[string]any{"lease": l, "outcome": "passed", "exit_code": 0}); status != 200 {
						fail(fmt.Errorf("complete: %d %s", status, body))
					}
					requests.Add(1)
				}
			}(tokens[i])
		}
		wg.Wait()
		return perSecond(int(requests.Load()), time.Since(start)), first
	}
	var many, few []float64
	for round := range rounds {
		for _, which := range order(round) {
			n, into := most, &many
			if which == "raw" {
				n, into = invocationPool, &few
			}
			rate, err := phase(n)
			if err != nil && errorsSeen.Load() == 0 {
				return nil, fmt.Errorf("%d invocations: %w", n, err)
			}
			*into = append(*into, rate)
		}
	}
	return []row{{name: fmt.Sprintf("200 invocations over a 20-connection pool (%d errors)", errorsSeen.Load()),
		figure: median(many), baseline: median(few), unit: "requests/s", higherIsBetter: true, goal: 0.8,
		baselineName: "20 invocations", errors: int(errorsSeen.Load())}}, nil
}
