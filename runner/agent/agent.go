// Package agent is the ForgeCI runner: it claims jobs, keeps their leases
// alive, runs their steps in their own process groups and reports back,
// and stops a job the moment it learns (409, cancel, timeout) or must
// assume (heartbeats failing for a whole lease) that it no longer owns it.
//
// Files: agent.go claims; job.go holds one job's life from claim to
// report; workspace.go makes and removes its directories; steps.go runs
// its steps; transfer.go moves trees between S3 and the workspace;
// logs.go streams its output; idtoken.go serves its steps identity
// tokens (idtokenclient.go is the steps' side).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
)

// Config of one runner process.
type Config struct {
	Client      *client.Client
	Labels      []string
	WorkDir     string
	Concurrency int
	// KillGrace is how long a step gets between SIGTERM and SIGKILL.
	KillGrace time.Duration
	Log       *slog.Logger
	// Isolation keeps steps from the runner and from each other (nil:
	// mode none, with a cgroup per job when the runner may make one).
	Isolation *isolate.Isolator
	// Ephemeral: run exactly one job, then return.
	Ephemeral bool
	// MaxIdle, with Ephemeral: return if no job was claimed this long
	// (checked between polls, never cutting a claim short, whose lease
	// would then be lost): a scaled-out machine that found no work ends.
	MaxIdle time.Duration
}

// Agent runs jobs.
type Agent struct {
	cfg Config
	// running holds the leases of the attempts in progress, by job ID
	// (newJob; Abort).
	mu      sync.Mutex
	running map[string][]*client.Lease
	// workLock is the work directory's lock, held shared while it runs.
	workLock *os.File
	// stop ends every slot's claiming, with its cause (Run).
	stop context.CancelCauseFunc
}

// ErrTokenRefused is Run's end when the control plane refuses the
// runner's token (401): revoked, or of another installation. Polling on
// would only have the database look it up again and again (no verdict
// answers an unknown token): the runner stops instead.
var ErrTokenRefused = errors.New("the control plane refuses this runner's token (revoked, or of another " +
	"installation): register the runner again")

// New returns an agent.
func New(cfg Config) *Agent {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Client != nil {
		cfg.Client.Slots = cfg.Concurrency // said in its claims, for the runners page
	}
	return &Agent{cfg: cfg, running: map[string][]*client.Lease{}}
}

// Run claims and runs jobs until ctx is done; then it stops claiming and
// waits for the jobs in progress to finish. Abort stops them instead.
func (a *Agent) Run(ctx context.Context) error {
	err := a.prepare()
	if a.workLock != nil {
		defer a.workLock.Close()
	}
	if err != nil {
		return err
	}
	defer a.cfg.Isolation.Close()
	ctx, a.stop = context.WithCancelCause(ctx)
	defer a.stop(nil)
	if a.cfg.Ephemeral {
		a.worker(ctx, 0)
	} else {
		var wg sync.WaitGroup
		for i := range a.cfg.Concurrency {
			wg.Add(1)
			go func(slot int) {
				defer wg.Done()
				a.worker(ctx, slot)
			}(i)
		}
		wg.Wait()
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrTokenRefused) {
		return cause
	}
	return nil
}

// prepare sets up isolation and the work directory, and proves that a
// step can run through them before any job is claimed.
func (a *Agent) prepare() error {
	if a.cfg.Isolation == nil {
		iso, err := isolate.New(isolate.Config{Mode: isolate.None}, a.cfg.Concurrency)
		if err != nil {
			return err
		}
		a.cfg.Isolation = iso
	}
	iso := a.cfg.Isolation
	if iso.Warning != "" {
		a.cfg.Log.Warn(iso.Warning)
	}
	perm := os.FileMode(0o700)
	if iso.Mode() != isolate.None {
		// Slot users pass through to their own workspaces; they cannot
		// list what is here.
		perm = 0o711
	}
	if err := os.MkdirAll(a.cfg.WorkDir, perm); err != nil {
		return err
	}
	if fi, err := os.Stat(a.cfg.WorkDir); err == nil && perm&0o001 != 0 && fi.Mode().Perm()&0o001 == 0 {
		// A work directory left private by a runner without isolation.
		if err := os.Chmod(a.cfg.WorkDir, fi.Mode().Perm()|0o001); err != nil {
			return err
		}
	}
	if err := iso.CheckWorkDir(a.cfg.WorkDir); err != nil {
		return err
	}
	lock, swept, refused, err := lockWorkDir(a.cfg.WorkDir)
	if err != nil {
		return err
	}
	a.workLock = lock
	if refused != "" {
		a.cfg.Log.Warn(refused, "work_dir", a.cfg.WorkDir)
	}
	if swept > 0 {
		a.cfg.Log.Warn("removed what runners no longer running had left in the work directory", "attempts", swept)
	}
	sweepSockets(filepath.Join(a.cfg.WorkDir, "id-token"))
	return iso.Probe(a.cfg.WorkDir)
}

// sweepSockets removes the identity-token sockets of jobs a runner that
// died was running: those nothing answers on (a live one, of a runner
// wrongly given the same work directory, stays).
func sweepSockets(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if e.Type()&fs.ModeSocket == 0 {
			continue
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		_ = os.Remove(path)
	}
}

// Abort stops every job in progress: their process groups are killed and
// nothing more is reported, so their leases expire and the control plane
// records them ABORTED (their steps may have had side effects).
func (a *Agent) Abort() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, attempts := range a.running {
		for _, h := range attempts {
			h.Abandon(ErrRunnerStopping)
		}
	}
}

func (a *Agent) worker(ctx context.Context, slot int) {
	b := client.Backoff{Base: time.Second, Max: 30 * time.Second}
	var poll client.Poll
	started := time.Now()
	for ctx.Err() == nil {
		if poll.After > 0 && sleep(ctx, jitter(poll.After)) != nil {
			return
		}
		if a.cfg.Ephemeral && a.cfg.MaxIdle > 0 && time.Since(started) > a.cfg.MaxIdle {
			a.cfg.Log.Info("no job within max-idle: exiting", "max_idle", a.cfg.MaxIdle)
			return
		}
		claim, next, err := a.cfg.Client.ClaimIdle(ctx, a.cfg.Labels, 20*time.Second, poll.Hint)
		poll = next
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if client.Unauthorized(err) {
				a.stop(fmt.Errorf("%w (%v)", ErrTokenRefused, err))
				return
			}
			a.cfg.Log.Warn("claim failed", "err", err, "retry_in", b.Next())
			if b.Wait(ctx) != nil {
				return
			}
			continue
		}
		b.Reset()
		if claim == nil {
			continue
		}
		// A claimed job runs to its end even if ctx (shutdown) is done.
		if !a.runJob(claim, slot) {
			// Something of the last job may still run as this slot's
			// user: the next job must not share it.
			a.cfg.Log.Error("slot retired: its last job's processes could not be killed", "slot", slot)
			return
		}
		if a.cfg.Ephemeral {
			return
		}
	}
}

// jitter spreads the polls of many slots: d plus up to a tenth.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
