package chaos

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/forgeci/forgeci/chaos/faultproxy"
)

// maxReplays bounds the heartbeats kept to send again: one a job.
const maxReplays = 8

// replayHeader marks a replayed request, for the op log.
const replayHeader = "X-Chaos-Replay"

// replay is a request as a runner sent it.
type replay struct {
	path   string
	header http.Header
	body   []byte
}

// keepReplay keeps an accepted heartbeat of job, the first of each job,
// until maxReplays are kept (none once replaying began).
func (h *Harness) keepReplay(job string, ex faultproxy.Exchange) {
	h.replayMu.Lock()
	defer h.replayMu.Unlock()
	if h.replays == nil {
		h.replays = map[string]replay{}
	}
	if _, ok := h.replays[job]; ok || len(h.replays) >= maxReplays || !h.faultOn.Load() {
		return
	}
	h.replays[job] = replay{path: ex.Request.URL.Path, header: ex.Request.Header.Clone(), body: bytes.Clone(ex.Body)}
}

// replayStale sends the kept heartbeats again, through the runners' proxy,
// once every job has ended: each carries a lease that ended, so each is a
// stale request the control plane must refuse (the checker judges them
// with the others). A run's faults may by chance make no stale request of
// their own; these make sure every run tests the fence.
func (h *Harness) replayStale(ctx context.Context) {
	h.replayMu.Lock()
	kept := make([]replay, 0, len(h.replays))
	for _, r := range h.replays {
		kept = append(kept, r)
	}
	h.replayMu.Unlock()
	client := &http.Client{Timeout: 30 * time.Second}
	for _, r := range kept {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.runnerProxy.URL()+r.path, bytes.NewReader(r.body))
		if err != nil {
			continue
		}
		req.Header = r.header.Clone()
		req.Header.Set(replayHeader, "1")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	h.progress("replayed %d heartbeats of ended leases", len(kept))
}
