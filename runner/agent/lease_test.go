package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// heartbeatServer accepts heartbeats while accept is set, noting when the
// last accepted one arrived; then it answers none (they hang until the
// runner gives up). Log appends are all taken; completions hang.
type heartbeatServer struct {
	accept atomic.Bool
	stop   chan struct{}
	mu     sync.Mutex
	last   time.Time // arrival of the last accepted heartbeat
	offset int64
}

func (s *heartbeatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/"+protocol.RouteComplete):
		// Never answered: the runner must give up at the lease's end.
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
	case strings.HasSuffix(r.URL.Path, "/"+protocol.RouteHeartbeat):
		arrived := time.Now()
		if !s.accept.Load() {
			select {
			case <-r.Context().Done():
			case <-s.stop:
			}
			return
		}
		s.mu.Lock()
		s.last = arrived
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(protocol.HeartbeatResponse{})
	case strings.HasSuffix(r.URL.Path, "/"+protocol.RouteLogs):
		var req protocol.LogsRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		s.mu.Lock()
		s.offset += int64(len(req.Data))
		next := s.offset
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(protocol.LogsResponse{NextOffset: next})
	default:
		http.Error(w, "{}", http.StatusNotFound)
	}
}

// gone reports whether process pid has ended (a zombie has).
func gone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}

// TestLeaseLossKillsAtOnce: once the control plane stops answering
// heartbeats, the job's processes (a step ignoring SIGTERM and one it
// left in the background) are gone by the time the lease expires on the
// server: the arrival of the last accepted heartbeat plus the TTL.
func TestLeaseLossKillsAtOnce(t *testing.T) {
	s := &heartbeatServer{stop: make(chan struct{})}
	s.accept.Store(true)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(s.stop) })
	iso, err := isolate.New(isolate.Config{Mode: isolate.None}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iso.Close)
	c := client.New(ts.URL, "runner-secret")
	a := New(Config{Client: c, KillGrace: 10 * time.Second, Isolation: iso,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const ttl = 3 * time.Second
	j := heldJob(t, a, ttl)
	box, err := iso.NewBox(0, filepath.Join(t.TempDir(), "run-1", "job-1", "lease-1"), isolate.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	if err := box.HandOver(); err != nil {
		t.Fatal(err)
	}
	j.box, j.ws = box, box.Workspace()
	hbStop, endHeartbeats := context.WithCancel(context.Background())
	t.Cleanup(endHeartbeats)
	guard := j.guardLease()
	t.Cleanup(guard.stop)
	go j.heartbeat(hbStop, guard)

	pids := filepath.Join(box.TmpDir(), "pids")
	ended := make(chan int, 1)
	go func() {
		code, _ := j.runStep(domain.Step{Run: "trap '' TERM\nsleep 300 &\necho $$ $! > " + pids + ".new\nmv " + pids + ".new " + pids + "\nsleep 300\n"})
		ended <- code
	}()
	var pid []int
	for deadline := time.Now().Add(10 * time.Second); len(pid) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the step did not start")
		}
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pid = append(pid, n)
		}
	}
	time.Sleep(ttl / 2) // a heartbeat or two accepted meanwhile
	s.accept.Store(false)
	stopped := time.Now()
	for !gone(pid[0]) || !gone(pid[1]) {
		if time.Since(stopped) > time.Minute {
			t.Fatal("the job's processes still run a minute after heartbeats stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	goneAt := time.Now()
	s.mu.Lock()
	expiry := s.last.Add(ttl)
	s.mu.Unlock()
	if goneAt.After(expiry) {
		t.Fatalf("the job's processes were gone %s after the lease expired", goneAt.Sub(expiry))
	}
	if !j.lease.Lost() {
		t.Fatal("the lease was not given up")
	}
	select {
	case code := <-ended:
		t.Logf("step ended %d, %s before the lease expired", code, expiry.Sub(goneAt))
	case <-time.After(5 * time.Second):
		t.Fatal("the step did not end")
	}
}

// TestReportKeepsTheLeaseDeadline: the report (the log's last batches,
// the completion) comes after the heartbeats stop, and is a lease side
// effect too: a completion the control plane does not answer is given up
// at the lease's end by the runner's clock, not 30 s later.
func TestReportKeepsTheLeaseDeadline(t *testing.T) {
	s := &heartbeatServer{stop: make(chan struct{})}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(s.stop) })
	a := New(Config{Client: client.New(ts.URL, "runner-secret"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const ttl = 2 * time.Second
	j := heldJob(t, a, ttl)
	guard := j.guardLease() // as runJob: the heartbeats have stopped, the guard holds until the report returns
	defer guard.stop()
	start := time.Now()
	j.report(a.cfg.Log, domain.OutcomePassed, 0, func() {})
	if took := time.Since(start); took > ttl+time.Second || !j.lease.Lost() {
		t.Fatalf("the report took %s (lease lost: %v), want it given up within the %s lease", took, j.lease.Lost(), ttl)
	}
}

// heldJob is a job of a's holding a lease of ttl, its log going.
func heldJob(t *testing.T, a *Agent, ttl time.Duration) *job {
	t.Helper()
	claim := &protocol.Claim{LeaseTTLSeconds: int(ttl / time.Second),
		Lease: domain.Lease{RunID: "run-1", JobID: "job-1", RunnerID: "runner-1", LeaseID: "lease-1", Generation: 1},
		Job:   domain.ClaimedJob{Name: "j", TimeoutSeconds: 600}}
	j, done := a.newJob(claim)
	t.Cleanup(done)
	go j.logs.loop()
	return j
}
