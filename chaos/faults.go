package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/chaos/faultproxy"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// faultLoop injects the harness's own faults until ctx is done.
func (h *Harness) faultLoop(ctx context.Context) {
	f := h.cfg.Faults
	if f.Every <= 0 {
		<-ctx.Done()
		return
	}
	pick := h.newPicker([]weighted{{"sigkill", f.Kill}, {"sigstop", f.Stop}, {"pg_terminate", f.Terminate},
		{"pg_restart", f.Restart}, {"cancel", f.Cancel}, {"sweeper_stall", f.Stall}})
	var lastRestart time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(f.Every/2, f.Every*3/2)):
		}
		kind := pick()
		if kind == "pg_restart" && time.Since(lastRestart) < f.RestartGap {
			kind = "pg_terminate"
		}
		h.inject(ctx, kind)
		if kind == "pg_restart" {
			lastRestart = time.Now()
		}
	}
}

type weighted struct {
	name   string
	weight float64
}

// newPicker chooses fault kinds in proportion to their weights by smooth
// weighted round robin from a random phase: any run of picks as long as the
// weights' total holds each kind about as often as its weight says, so a
// short run sees every kind it weighs (a random draw can miss one, and did:
// a 14-second run with three faults drew no SIGSTOP).
func (h *Harness) newPicker(kinds []weighted) func() string {
	total := 0.0
	for _, k := range kinds {
		total += k.weight
	}
	current := make([]float64, len(kinds))
	for i := range current {
		current[i] = h.float() * total
	}
	return func() string {
		best := -1
		for i, k := range kinds {
			if k.weight <= 0 {
				continue
			}
			current[i] += k.weight
			if best < 0 || current[i] > current[best] {
				best = i
			}
		}
		if best < 0 {
			return ""
		}
		current[best] -= total
		return kinds[best].name
	}
}

// inject injects one fault of kind.
func (h *Harness) inject(ctx context.Context, kind string) {
	f := h.cfg.Faults
	switch kind {
	case "sigkill":
		if r := h.pickRunner(); r != nil {
			r.sigkill(h.between(300*time.Millisecond, 1500*time.Millisecond))
		}
	case "sigstop":
		if r := h.pickRunner(); r != nil {
			lo, hi := f.StopFor[0], f.StopFor[1]
			if hi <= 0 {
				lo, hi = 200*time.Millisecond, h.cfg.LeaseTTL*5/2
			}
			r.sigstop(h.between(lo, hi))
		}
	case "pg_terminate":
		h.terminate(ctx, 1+h.intn(3))
	case "pg_restart":
		h.restartDatabase(ctx)
	case "sweeper_stall":
		// The scheduled sweeper late or failing for one to three
		// leases: expired leases then stay RUNNING in the table, and
		// only the lease check's own expiry test (the database's
		// now()) refuses a runner that comes back in that window.
		start := time.Now()
		d := h.between(h.cfg.LeaseTTL, 3*h.cfg.LeaseTTL)
		h.stallUntil.Store(start.Add(d).UnixNano())
		h.ops.add(Op{Kind: "fault", Fault: "sweeper_stall", T: start.UnixNano(), End: start.Add(d).UnixNano(), Detail: d.String()})
	case "cancel":
		h.cancelRecentRun(ctx)
	}
}

// restartDatabase restarts PostgreSQL, by a fast shutdown or a crash.
func (h *Harness) restartDatabase(ctx context.Context) {
	crash := h.float() < 0.5
	start := time.Now()
	err := h.cluster.Restart(ctx, crash)
	detail := "fast shutdown"
	if crash {
		detail = "crash (SIGKILL, recovery)"
	}
	if err != nil {
		detail += ": " + err.Error()
	}
	h.ops.add(Op{Kind: "fault", Fault: "pg_restart", T: start.UnixNano(), End: time.Now().UnixNano(), Detail: detail})
}

// cancelRecentRun cancels one of the last runs submitted.
func (h *Harness) cancelRecentRun(ctx context.Context) {
	h.runsMu.Lock()
	var id string
	if n := len(h.runs); n > 0 {
		id = h.runs[max(0, n-1-h.intn(min(n, 8)))]
	}
	h.runsMu.Unlock()
	if id == "" {
		return
	}
	err := h.userCall(ctx, "/v1/runs/"+id+"/cancel", nil, nil, http.StatusAccepted)
	op := Op{Kind: "fault", Fault: "cancel", Target: id}
	if err != nil {
		op.Detail = err.Error()
	}
	h.ops.add(op)
}

// pickRunner picks a running runner for a fault, keeping at least one
// untouched so that work goes on.
func (h *Harness) pickRunner() *runnerProc {
	healthy := 0
	for _, r := range h.runners {
		r.mu.Lock()
		if !r.busy && !r.dead && !r.stopped {
			healthy++
		}
		r.mu.Unlock()
	}
	if healthy <= 1 {
		return nil
	}
	for range 10 {
		if r := h.runners[h.intn(len(h.runners))]; r.claimForFault() {
			return r
		}
	}
	return nil
}

// terminate ends up to n of the control plane's database sessions.
func (h *Harness) terminate(ctx context.Context, n int) {
	var killed int
	err := h.withAdmin(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `
			SELECT count(*) FROM (
			    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			    WHERE application_name = 'forgeci' AND datname = current_database()
			    ORDER BY random() LIMIT $1) t`, n).Scan(&killed)
	})
	op := Op{Kind: "fault", Fault: "pg_terminate", Detail: fmt.Sprint(killed)}
	if err != nil {
		op.Detail = "0: " + err.Error()
	}
	h.ops.add(op)
}

// decide is the proxies' fault policy: while faults are on, each request
// independently may be dropped, answered into the void, or delayed. At the
// S3 proxy only runners' requests (presigned URLs) are touched.
func (h *Harness) decide(s3 bool) func(r *http.Request, body []byte) (faultproxy.Fault, time.Duration) {
	f := h.cfg.Faults
	return func(r *http.Request, _ []byte) (faultproxy.Fault, time.Duration) {
		if !h.faultOn.Load() || s3 && r.URL.Query().Get("X-Amz-Signature") == "" {
			return faultproxy.None, 0
		}
		x := h.float()
		switch {
		case x < f.DropRequest:
			return faultproxy.DropRequest, 0
		case x < f.DropRequest+f.DropResponse:
			return faultproxy.DropResponse, 0
		case x < f.DropRequest+f.DropResponse+f.Delay && !s3 && strings.HasPrefix(r.URL.Path, "/v1/runner/jobs/") && h.float() < 0.25:
			// Delivered late: past the lease it was sent under, whatever
			// the runner did meanwhile (it gives the lease up by its own
			// clock, so the control plane must refuse this one).
			return faultproxy.Delay, h.cfg.LeaseTTL + h.between(500*time.Millisecond, 1500*time.Millisecond)
		case x < f.DropRequest+f.DropResponse+f.Delay:
			return faultproxy.Delay, h.between(100*time.Millisecond, 1500*time.Millisecond)
		}
		return faultproxy.None, 0
	}
}

// routeOf names a runner route by its path: claim, heartbeat, logs,
// artifacts/commit, ...
func routeOf(path string) (route, jobID string) {
	if rest, ok := strings.CutPrefix(path, "/v1/runner/jobs/"); ok {
		jobID, route, _ = strings.Cut(rest, "/")
		return route, jobID
	}
	return strings.TrimPrefix(strings.TrimPrefix(path, "/v1/runner/"), "/v1/"), ""
}

// arrived is when the server got the request: a delayed one later than
// the proxy did, and the lease is judged as of then.
func arrived(ex faultproxy.Exchange) time.Time {
	if !ex.Forwarded.IsZero() {
		return ex.Forwarded
	}
	return ex.Received
}

// logRequest records one runner request to the control plane.
func (h *Harness) logRequest(ex faultproxy.Exchange) {
	route, jobID := routeOf(ex.Request.URL.Path)
	token := strings.TrimSpace(strings.TrimPrefix(ex.Request.Header.Get("Authorization"), "Bearer "))
	op := Op{Kind: "request", Runner: h.tokens[token], Route: route, Job: jobID, Status: ex.Status,
		Fault: string(ex.Fault), DelayMS: ex.Delayed.Milliseconds(), Delivered: ex.Delivered,
		Received: arrived(ex).UnixNano(), Replay: ex.Request.Header.Get(replayHeader) != ""}
	if !ex.Answered.IsZero() {
		op.Answered = ex.Answered.UnixNano()
	}
	if ex.Err != nil {
		op.Err = ex.Err.Error()
	}
	var req struct {
		Lease   *domain.Lease `json:"lease"`
		Offset  *int64        `json:"offset"`
		Data    []byte        `json:"data"`
		Name    string        `json:"name"`
		Digest  string        `json:"digest"`
		Key     string        `json:"key"`
		Job     string        `json:"job"`
		Outcome string        `json:"outcome"`
	}
	if json.Unmarshal(ex.Body, &req) == nil {
		op.Lease, op.Offset, op.Name, op.Digest, op.Key, op.Outcome = req.Lease, req.Offset, req.Name, req.Digest, req.Key, req.Outcome
		if route == "artifacts/fetch" {
			op.Key = req.Job // the upstream job's name
		}
		if req.Data != nil {
			sum := sha256.Sum256(req.Data)
			op.Len, op.SHA = len(req.Data), hex.EncodeToString(sum[:])
		}
	}
	switch {
	case ex.Status >= 300:
		var e struct{ Error struct{ Code string } }
		_ = json.Unmarshal(ex.Response, &e)
		op.Code = e.Error.Code
	case ex.Status == http.StatusOK && route == "claim":
		var c protocol.Claim
		if json.Unmarshal(ex.Response, &c) == nil {
			l := c.Lease
			l.ExpiresAt = nil
			op.Claimed = &l
			op.Job = l.JobID
		}
	case ex.Status == http.StatusOK && (route == "artifacts/fetch" || route == "cache/restore"):
		var b struct{ Digest, Key string }
		_ = json.Unmarshal(ex.Response, &b)
		op.Digest = b.Digest
		if route == "cache/restore" {
			op.Key = b.Key
		}
	}
	h.ops.add(op)
	if route == "heartbeat" && ex.Status == http.StatusOK && op.Lease != nil && !op.Replay {
		h.keepReplay(jobID, ex)
	}
}

// logS3 records one runner download or upload through the S3 proxy.
func (h *Harness) logS3(ex faultproxy.Exchange) {
	if ex.Request.URL.Query().Get("X-Amz-Signature") == "" {
		return // the control plane's own S3 calls
	}
	op := Op{Kind: "request", Route: "s3 " + ex.Request.Method, Key: ex.Request.URL.Path, Status: ex.Status,
		Fault: string(ex.Fault), DelayMS: ex.Delayed.Milliseconds(), Delivered: ex.Delivered,
		Received: ex.Received.UnixNano(), Len: len(ex.Body) + len(ex.Response)}
	if ex.Err != nil {
		op.Err = ex.Err.Error()
	}
	h.ops.add(op)
}
