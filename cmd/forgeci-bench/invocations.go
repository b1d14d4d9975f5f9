package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/domain"
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
	inv := &invocations{ctx: ctx, db: db, h: (&api.Server{Store: db.Store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler(),
		chunk: bytes.Repeat([]byte("x"), logChunk)}
	const most = 200
	inv.tokens = make([]string, most)
	for i := range inv.tokens {
		reg, _, err := db.Store.CreateRegistrationToken(ctx, time.Minute, "bench", store.Scope{Untrusted: true})
		if err != nil {
			return nil, err
		}
		if _, inv.tokens[i], err = db.Store.RegisterRunner(ctx, reg, fmt.Sprintf("inv-%d", i), []string{"linux"}); err != nil {
			return nil, err
		}
	}
	var many, few []float64
	for round := range rounds {
		for _, which := range order(round) {
			n, into := most, &many
			if which == "raw" {
				n, into = invocationPool, &few
			}
			rate, err := inv.phase(n)
			if err != nil && inv.errorsSeen.Load() == 0 {
				return nil, fmt.Errorf("%d invocations: %w", n, err)
			}
			*into = append(*into, rate)
		}
	}
	return []row{{name: fmt.Sprintf("200 invocations over a 20-connection pool (%d errors)", inv.errorsSeen.Load()),
		figure: median(many), baseline: median(few), unit: "requests/s", higherIsBetter: true, goal: 0.8,
		baselineName: "20 invocations", errors: int(inv.errorsSeen.Load())}}, nil
}

// invocations drives the real handlers as that many Lambda invocations
// would, each request with its own deadline.
type invocations struct {
	ctx        context.Context
	db         *benchDB
	h          http.Handler
	tokens     []string
	chunk      []byte
	errorsSeen atomic.Int64
	requests   atomic.Int64
}

func (inv *invocations) invoke(token, path string, body any) (int, []byte) {
	ictx, cancel := context.WithTimeout(inv.ctx, invocationTimeout)
	defer cancel()
	b, _ := json.Marshal(body)
	req := httptest.NewRequestWithContext(ictx, http.MethodPost, path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	inv.h.ServeHTTP(rec, req)
	inv.requests.Add(1)
	if rec.Code >= 500 || ictx.Err() != nil {
		inv.errorsSeen.Add(1)
	}
	return rec.Code, rec.Body.Bytes()
}

// phase runs n clients for invocationDuration and returns requests/s.
func (inv *invocations) phase(n int) (float64, error) {
	// Runs of 10 jobs, as pipelines are; enough for the whole phase.
	if err := seedQueuedRuns(inv.ctx, inv.db.Pool, 30000, 10); err != nil {
		return 0, err
	}
	inv.requests.Store(0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	stop := time.Now().Add(invocationDuration)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func(token string) {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := inv.job(token); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					if errors.Is(err, errDry) {
						return
					}
				}
			}
		}(inv.tokens[i])
	}
	wg.Wait()
	return perSecond(int(inv.requests.Load()), time.Since(start)), first
}

var errDry = errors.New("the queue ran dry")

// job claims a job and runs it through: three heartbeats and log appends,
// then complete.
func (inv *invocations) job(token string) error {
	status, body := inv.invoke(token, protocol.PathClaim, protocol.ClaimRequest{})
	switch status {
	case http.StatusOK:
	case http.StatusNoContent:
		return errDry
	default:
		return nil
	}
	var c protocol.Claim
	if err := json.Unmarshal(body, &c); err != nil {
		return err
	}
	lease, id := protocol.WithLease(c.Lease), c.Lease.JobID
	var err error
	for k := range 3 {
		offset := int64(k * logChunk)
		if status, body := inv.invoke(token, protocol.JobPath(id, protocol.RouteHeartbeat), protocol.HeartbeatRequest{Leased: lease}); status != 200 {
			err = fmt.Errorf("heartbeat: %d %s", status, body)
		}
		if status, body := inv.invoke(token, protocol.JobPath(id, protocol.RouteLogs), protocol.LogsRequest{Leased: lease, Offset: &offset, Data: inv.chunk}); status != 200 {
			err = fmt.Errorf("logs: %d %s", status, body)
		}
	}
	exit := 0
	if status, body := inv.invoke(token, protocol.JobPath(id, protocol.RouteComplete), protocol.CompleteRequest{Leased: lease, Outcome: domain.OutcomePassed, ExitCode: &exit}); status != 200 {
		err = fmt.Errorf("complete: %d %s", status, body)
	}
	return err
}
