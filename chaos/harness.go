// Package chaos runs ForgeCI under faults and proves afterwards, from what
// was logged, that nothing the protocol promises was broken.
//
// A run of the harness starts its own PostgreSQL cluster (so that it may
// terminate its backends and restart it), S3 behind a fault proxy, the
// control plane's handlers in this process behind another fault proxy, the
// sweeper on a ticker and several real forgeci-runner processes. For a
// bounded time it submits a stream of pipelines while it SIGKILLs and
// SIGSTOP/SIGCONTs runners, terminates the control plane's database
// sessions, restarts PostgreSQL (cleanly or by crash), cancels runs, and
// the proxies drop or delay requests at every protocol step. Then it stops
// the faults, lets the runs finish, and dumps the database and the
// artifacts. Check reads the operation log and the dump and lists every
// violation of the invariants (see Check).
package chaos

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/chaos/faultproxy"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/localstack"
	"github.com/forgeci/forgeci/shared/pglocal"
	"github.com/forgeci/forgeci/shared/store"
)

//go:embed audit.sql
var auditSQL string

// Config of one chaos run.
type Config struct {
	// Dir receives the operation log (ops.jsonl), the dump (dump.json),
	// the control plane's and runners' logs and the runners' workspaces.
	Dir         string
	Duration    time.Duration // how long faults are injected and runs submitted
	Settle      time.Duration // how long runs may take to finish afterwards
	Runners     int
	Concurrency int // jobs per runner
	LeaseTTL    time.Duration
	SweepEvery  time.Duration
	InFlight    int // runs kept unfinished at once
	Seed        uint64
	// S3 is the S3-compatible server (endpoint and credentials); the
	// harness makes its own bucket.
	S3 cas.Config
	// DBClock, when set, is a libfaketime offset for PostgreSQL ("+5m",
	// "-5m"): the database's clock, the only one lease decisions use, is
	// then that far from every other clock here.
	DBClock string
	// RunnerBin is a forgeci-runner binary; built when empty.
	RunnerBin string
	Faults    Faults
	// Progress receives a line per phase; nil for none.
	Progress io.Writer
}

// Faults says which faults to inject and how often.
type Faults struct {
	// Every is the mean time between the harness's own faults (0: none);
	// each picks a kind by these relative weights.
	Every                                         time.Duration
	Kill, Stop, Terminate, Restart, Cancel, Stall float64
	// RestartGap is the least time between PostgreSQL restarts.
	RestartGap time.Duration
	// StopFor bounds how long a SIGSTOP lasts (default: 200ms to 2.5
	// leases, so some stay within the lease and some run well past it).
	StopFor [2]time.Duration
	// Per request at both proxies, the chance of each fault.
	DropRequest, DropResponse, Delay float64
}

// DefaultFaults is the mix `make chaos` and the short test use.
func DefaultFaults() Faults {
	return Faults{Every: 1200 * time.Millisecond, Kill: 2, Stop: 3, Terminate: 3, Restart: 1, Cancel: 0.5, Stall: 1,
		RestartGap: 8 * time.Second, DropRequest: 0.02, DropResponse: 0.02, Delay: 0.02}
}

// Harness is one chaos run in progress.
type Harness struct {
	cfg     Config
	ops     *opLog
	rng     *mrand.Rand
	rngMu   sync.Mutex
	faultOn atomic.Bool

	stack   *localstack.Stack
	cluster *pglocal.Cluster
	dbURL   string
	st      *store.Store
	blobs   *cas.Store
	bucket  string

	cpURL, userToken string
	runnerProxy      *faultproxy.Proxy
	s3Proxy          *faultproxy.Proxy
	sources          map[string]domain.Source

	runners []*runnerProc
	tokens  map[string]string // runner token -> runner ID

	runsMu sync.Mutex
	runs   []string

	// replays are heartbeats the control plane accepted, one a job, sent
	// again once every job has ended (replayStale).
	replayMu sync.Mutex
	replays  map[string]replay

	// stallUntil (Unix nanoseconds): the sweeper skips its ticks until
	// then, the "sweeper_stall" fault.
	stallUntil atomic.Int64

	// bg counts the goroutines ending faults (SIGCONT, restarts); they
	// end early once faultsOver is closed.
	bg         sync.WaitGroup
	faultsOver chan struct{}
}

// wait sleeps for d or until the fault phase is over.
func (h *Harness) wait(d time.Duration) {
	select {
	case <-time.After(d):
	case <-h.faultsOver:
	}
}

// Run runs the harness as configured and returns the checker's report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Runners <= 0 {
		cfg.Runners = 3
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 2
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 4 * time.Second
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = 500 * time.Millisecond
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 6
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 90 * time.Second
	}
	if cfg.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for _, x := range b {
			cfg.Seed = cfg.Seed<<8 | uint64(x)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	h := &Harness{cfg: cfg, rng: mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), tokens: map[string]string{},
		faultsOver: make(chan struct{})}
	var err error
	if h.ops, err = createOpLog(filepath.Join(cfg.Dir, "ops.jsonl")); err != nil {
		return nil, err
	}
	defer h.teardown()
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	if err := h.chaos(ctx); err != nil {
		return nil, err
	}
	dump, err := h.dump(ctx)
	if err != nil {
		return nil, err
	}
	if err := h.ops.close(); err != nil {
		return nil, err
	}
	ops, err := ReadOps(filepath.Join(cfg.Dir, "ops.jsonl"))
	if err != nil {
		return nil, err
	}
	rep := Check(ops, dump)
	rep.Config = fmt.Sprintf("%s of faults, %d runners x %d, lease %s, sweep every %s, seed %d",
		cfg.Duration, cfg.Runners, cfg.Concurrency, cfg.LeaseTTL, cfg.SweepEvery, cfg.Seed)
	if cfg.DBClock != "" {
		rep.Config += ", database clock " + cfg.DBClock
	}
	return rep, nil
}

func (h *Harness) progress(format string, args ...any) {
	if h.cfg.Progress != nil {
		fmt.Fprintf(h.cfg.Progress, "chaos: "+format+"\n", args...)
	}
}

func (h *Harness) float() float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Float64()
}

func (h *Harness) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

// between returns a random duration in [lo, hi).
func (h *Harness) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.float()*float64(hi-lo))
}

func (h *Harness) setup(ctx context.Context) error {
	dir := h.cfg.Dir
	pgLog, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return err
	}
	// Durable commits: a crash restart must not lose what was acknowledged
	// (synchronous_commit off, as the test clusters run, would). fsync off
	// is still safe here: the operating system, and its page cache, never
	// crashes in this test, only PostgreSQL does.
	opts := pglocal.Options{Log: pgLog, Settings: map[string]string{"fsync": "off", "max_connections": "200"}}
	if h.cfg.DBClock != "" {
		lib, err := FakeTimeLibrary()
		if err != nil {
			return err
		}
		opts.Env = []string{"LD_PRELOAD=" + lib, "FAKETIME=" + h.cfg.DBClock, "DONT_FAKE_MONOTONIC=1", "FAKETIME_DONT_RESET=1"}
	}
	h.progress("starting PostgreSQL")
	// S3 behind its proxy: presigned URLs name the proxy, so runners'
	// downloads and uploads pass through it.
	s3 := h.cfg.S3
	s3.Bucket = "chaos-" + randomHex(6)
	s3.PresignExpiry = 10 * time.Minute
	h.bucket = s3.Bucket
	cpLog, err := os.Create(filepath.Join(dir, "control-plane.log"))
	if err != nil {
		return err
	}
	h.stack, err = localstack.Start(ctx, localstack.Options{PG: opts, Log: pgLog, Database: "forgeci", S3: s3,
		Limits: store.Limits{LeaseTTL: h.cfg.LeaseTTL},
		Prepare: func(ctx context.Context, url string) error {
			h.dbURL = url
			if err := h.withAdmin(ctx, func(c *pgx.Conn) error {
				_, err := c.Exec(ctx, auditSQL)
				return err
			}); err != nil {
				return fmt.Errorf("install the audit triggers: %w", err)
			}
			return nil
		},
		WrapS3: func(endpoint string) (string, error) {
			p, err := faultproxy.Start(endpoint)
			if err != nil {
				return "", err
			}
			h.s3Proxy, p.Decide, p.Done = p, h.decide(true), h.logS3
			return p.URL(), nil
		}})
	if err != nil {
		return err
	}
	h.cluster, h.st, h.blobs = h.stack.Cluster, h.stack.Store, h.stack.CAS
	// The control plane: every handler, as forgeci dev mounts them.
	if h.cpURL, err = h.stack.Serve("127.0.0.1:0", h.stack.Server(slog.New(slog.NewTextHandler(cpLog, nil)))); err != nil {
		return err
	}
	if h.runnerProxy, err = faultproxy.Start(h.cpURL); err != nil {
		return err
	}
	h.runnerProxy.Decide = h.decide(false)
	h.runnerProxy.Done = h.logRequest

	if _, h.userToken, err = h.st.CreateUser(ctx, "chaos", store.RoleAdmin); err != nil {
		return err
	}
	project, err := h.st.CreateProject(ctx, "chaos", "main")
	if err != nil {
		return err
	}
	if h.sources, err = uploadVariants(ctx, h.blobs, dir, project.ID); err != nil {
		return err
	}
	return h.startRunners(ctx, dir)
}

// withAdmin runs fn on a fresh connection to the chaos database that is
// not the control plane's (so faults aimed at the control plane spare it).
func (h *Harness) withAdmin(ctx context.Context, fn func(*pgx.Conn) error) error {
	cfg, err := pgx.ParseConfig(h.dbURL)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["application_name"] = "chaos-harness"
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return fn(c)
}

func (h *Harness) teardown() {
	for _, r := range h.runners {
		r.kill()
		if strings.HasPrefix(r.workDir, "/var/lib/forgeci-chaos-") {
			_ = os.RemoveAll(filepath.Dir(r.workDir))
		}
	}
	if h.runnerProxy != nil {
		h.runnerProxy.Close()
	}
	if h.stack != nil {
		h.stack.Close()
	}
	if h.s3Proxy != nil {
		h.s3Proxy.Close()
	}
	_ = h.ops.close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FakeTimeLibrary finds libfaketime (Debian package faketime).
func FakeTimeLibrary() (string, error) {
	for _, pattern := range []string{"/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
		"/usr/local/lib/faketime/libfaketime.so.1"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0], nil
		}
	}
	return "", errors.New("libfaketime not found: install Debian's faketime package (make deps does)")
}
