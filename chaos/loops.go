package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fault phase: faults, the sweeper and a stream of submitted runs.

// chaos is the fault phase and the settling after it.
func (h *Harness) chaos(ctx context.Context) error {
	h.progress("running %s with faults (seed %d)", h.cfg.Duration, h.cfg.Seed)
	sweepCtx, stopSweeps := context.WithCancel(ctx)
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		h.sweepLoop(sweepCtx)
	}()
	defer func() {
		stopSweeps()
		<-sweepDone
	}()

	h.faultOn.Store(true)
	faultCtx, stopFaults := context.WithTimeout(ctx, h.cfg.Duration)
	defer stopFaults()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		h.submitLoop(faultCtx)
	}()
	go func() {
		defer wg.Done()
		h.faultLoop(faultCtx)
	}()
	wg.Wait()
	h.faultOn.Store(false)
	close(h.faultsOver)
	h.bg.Wait()
	// Every runner back: resumed, or restarted if it was killed.
	for _, r := range h.runners {
		r.revive()
	}
	h.progress("faults stopped; letting the runs finish (up to %s)", h.cfg.Settle)
	deadline := time.Now().Add(h.cfg.Settle)
	for {
		var open int
		err := h.withAdmin(ctx, func(c *pgx.Conn) error {
			return c.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state IN ('PENDING', 'QUEUED', 'RUNNING')`).Scan(&open)
		})
		if err == nil && open == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.progress("%d jobs still open after %s; the checker will say which", open, h.cfg.Settle)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	h.replayStale(ctx)
	for _, r := range h.runners {
		r.stop()
	}
	// A last sweep after any lease left could have expired.
	time.Sleep(h.cfg.SweepEvery)
	return nil
}

func (h *Harness) sweepLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Now().UnixNano() < h.stallUntil.Load() {
			select {
			case <-h.faultsOver:
			default:
				continue
			}
		}
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := h.st.Sweep(sctx)
		cancel()
		op := Op{Kind: "sweep", Start: start.UnixNano(), End: time.Now().UnixNano(), OK: err == nil,
			Aborted: res.Aborted, Requeued: res.Requeued}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			op.Err = err.Error()
		}
		h.ops.add(op)
	}
}

// submitLoop keeps cfg.InFlight runs unfinished, through the user API.
func (h *Harness) submitLoop(ctx context.Context) {
	for ctx.Err() == nil {
		var open int
		err := h.withAdmin(ctx, func(c *pgx.Conn) error {
			return c.QueryRow(ctx, `SELECT count(*) FROM runs WHERE finished_at IS NULL`).Scan(&open)
		})
		if err == nil && open < h.cfg.InFlight {
			// Three in five build-test (a random copy of it), else long or fails.
			v := []string{"long", "fails"}[h.intn(2)]
			if h.intn(5) < 3 {
				v = fmt.Sprintf("build-test-%02d", h.intn(cacheKeys))
			}
			if id, err := h.submit(ctx, v); err == nil {
				h.ops.add(Op{Kind: "submit", Run: id, Variant: v})
				h.runsMu.Lock()
				h.runs = append(h.runs, id)
				h.runsMu.Unlock()
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (h *Harness) submit(ctx context.Context, variant string) (string, error) {
	body, _ := json.Marshal(map[string]any{"project": "chaos", "source": h.sources[variant]})
	var run struct{ ID string }
	if err := h.userCall(ctx, "/v1/runs", body, &run, http.StatusCreated); err != nil {
		return "", err
	}
	return run.ID, nil
}

func (h *Harness) userCall(ctx context.Context, path string, body []byte, out any, want int) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodPost, h.cpURL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+h.userToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s: HTTP %d %s", path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
