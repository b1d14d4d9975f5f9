// Package agent is the ForgeCI runner: it claims jobs, keeps their leases
// alive, runs their steps in their own process groups and reports back,
// and stops a job the moment it learns (409, cancel, timeout) or must
// assume (heartbeats failing for a whole lease) that it no longer owns it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/snapshot"
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
}

// Agent runs jobs.
type Agent struct {
	cfg Config
	// running holds the cancel functions of jobs in progress (for Abort).
	mu      sync.Mutex
	running map[string]context.CancelFunc
}

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
	return &Agent{cfg: cfg, running: map[string]context.CancelFunc{}}
}

// Run claims and runs jobs until ctx is done; then it stops claiming and
// waits for the jobs in progress to finish. Abort stops them instead.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.prepare(); err != nil {
		return err
	}
	defer a.cfg.Isolation.Close()
	if a.cfg.Ephemeral {
		a.worker(ctx, 0)
		return nil
	}
	var wg sync.WaitGroup
	for i := range a.cfg.Concurrency {
		wg.Add(1)
		go func(slot int) {
			defer wg.Done()
			a.worker(ctx, slot)
		}(i)
	}
	wg.Wait()
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
	return iso.Probe(a.cfg.WorkDir)
}

// Abort stops every job in progress: their process groups are killed and
// nothing more is reported, so their leases expire and the control plane
// records them ABORTED (their steps may have had side effects).
func (a *Agent) Abort() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, cancel := range a.running {
		cancel()
	}
}

func (a *Agent) worker(ctx context.Context, slot int) {
	delay := time.Second
	for ctx.Err() == nil {
		claim, err := a.cfg.Client.Claim(ctx, a.cfg.Labels, 20*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.cfg.Log.Warn("claim failed", "err", err, "retry_in", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(delay*2, 30*time.Second)
			continue
		}
		delay = time.Second
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

// job is one job being run.
type job struct {
	a     *Agent
	claim *domain.Claim
	box   *isolate.Box
	ws    string
	// outputs counts the steps' output pipes still being copied.
	outputs sync.WaitGroup
	logs    *logAppender
	ctx     context.Context
	cancel  context.CancelFunc

	mu     sync.Mutex
	reason string // why the job was stopped: "lease lost", "canceled", "timeout"
}

func (j *job) stop(reason string) {
	j.mu.Lock()
	if j.reason == "" {
		j.reason = reason
	}
	j.mu.Unlock()
	j.cancel()
}

func (j *job) stopped() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.reason
}

func (a *Agent) runJob(c *domain.Claim, slot int) (slotOK bool) {
	l := c.Lease
	log := a.cfg.Log.With("job", c.Job.Name, "job_id", l.JobID, "generation", l.Generation)
	log.Info("claimed")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.Job.TimeoutSeconds)*time.Second)
	defer cancel()
	j := &job{a: a, claim: c, ctx: ctx, cancel: cancel}
	a.mu.Lock()
	a.running[l.JobID] = func() { j.stop("runner shutting down") }
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.running, l.JobID)
		a.mu.Unlock()
	}()

	redact := []string{a.cfg.Client.Token}
	for _, v := range c.Secrets {
		redact = append(redact, v)
	}
	// Values the control plane substituted for ${{ secrets.NAME }}.
	redact = append(redact, c.Mask...)
	for k, v := range c.Job.Env {
		if looksSecret(k) {
			redact = append(redact, v)
		}
	}
	j.logs = newLogAppender(a.cfg.Client, l, redact, func() { j.stop("lease lost") })
	go j.logs.loop()
	hbDone := make(chan struct{})
	go j.heartbeat(hbDone)

	outcome, exitCode := j.execute(slot)
	j.endProcesses(log)

	close(hbDone)
	reason := j.stopped()
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	defer func() { slotOK = j.cleanUp(log) }()
	if reason == "lease lost" || reason == "runner shutting down" {
		// No longer ours (or deliberately abandoned): report nothing more.
		log.Warn("job stopped without reporting", "reason", reason)
		return
	}
	why := ""
	switch reason {
	case "canceled":
		outcome = "canceled"
		fmt.Fprintf(j.logs, "\n==> job canceled\n")
	case "timeout":
		outcome, why = "failed", "timeout"
		fmt.Fprintf(j.logs, "\n==> job timed out after %d minutes\n", c.Job.TimeoutSeconds/60)
	}
	if hit := j.limitHit(); outcome == "failed" && hit != "" {
		why = hit
		fmt.Fprintf(j.logs, "==> %s\n", hit)
	}
	if err := j.logs.Close(fctx); err != nil && client.LostLease(err) {
		log.Warn("lease lost while flushing logs")
		return
	}
	if err := a.cfg.Client.Complete(fctx, l, outcome, exitCode, why); err != nil {
		log.Warn("complete failed", "err", err)
	} else {
		log.Info("completed", "outcome", outcome, "exit_code", exitCode)
	}
	return slotOK // set by cleanUp, deferred
}

// cleanUp kills whatever the job left running and deletes this lease's
// attempt directory, then the job's and the run's directories only if
// nothing else is using them: the next attempt of the same job may already
// be running here (a retry claimed by another slot the moment this one
// completed), and so may other jobs of the run.
func (j *job) cleanUp(log *slog.Logger) bool {
	l := j.claim.Lease
	jobDir := filepath.Join(j.a.cfg.WorkDir, l.RunID, l.JobID)
	ok := true
	if j.box != nil {
		if err := j.box.Close(); err != nil {
			log.Error("job not cleaned up", "err", err)
			ok = false
		}
	}
	_ = os.RemoveAll(filepath.Join(jobDir, l.LeaseID))
	_ = os.Remove(jobDir)
	_ = os.Remove(filepath.Dir(jobDir))
	return ok
}

// endProcesses kills whatever the job's steps left running and waits
// (briefly: a runner without cgroups cannot kill what escaped its process
// groups) for their last output to reach the log.
func (j *job) endProcesses(log *slog.Logger) {
	if j.box != nil {
		if err := j.box.Kill(); err != nil {
			log.Error("the job's processes could not be killed", "err", err)
		}
	}
	done := make(chan struct{})
	go func() {
		j.outputs.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

func (j *job) limitHit() string {
	if j.box == nil {
		return ""
	}
	return j.box.LimitHit()
}

// heartbeat extends the lease every third of its TTL. It stops the job on
// cancel_requested or a 409, and when no heartbeat has succeeded for a
// whole TTL (measured on the monotonic clock), because by then the control
// plane may have given the job to someone else.
func (j *job) heartbeat(done <-chan struct{}) {
	ttl := time.Duration(j.claim.LeaseTTLSeconds) * time.Second
	if ttl <= 0 {
		ttl = 60 * time.Second
	}
	lastOK := time.Now()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-j.ctx.Done():
			if errors.Is(j.ctx.Err(), context.DeadlineExceeded) {
				j.stop("timeout")
			}
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(context.Background(), ttl/3)
		cancelRequested, err := j.a.cfg.Client.Heartbeat(hctx, j.claim.Lease)
		cancel()
		switch {
		case err == nil:
			lastOK = time.Now()
			if cancelRequested {
				j.stop("canceled")
			}
		case client.LostLease(err):
			j.stop("lease lost")
		case time.Since(lastOK) >= ttl:
			j.stop("lease lost")
		}
	}
}

// execute prepares the workspace and runs the steps; it returns the
// outcome to report and the exit code of the last step run.
func (j *job) execute(slot int) (string, int) {
	c := j.claim
	fail := func(format string, args ...any) (string, int) {
		fmt.Fprintf(j.logs, "==> "+format+"\n", args...)
		return "failed", -1
	}
	if err := j.prepare(slot); err != nil {
		if j.stopped() != "" {
			return "failed", -1
		}
		return fail("%v", err)
	}
	exit := 0
	for i, st := range c.Job.Steps {
		if j.stopped() != "" {
			return "failed", exit
		}
		fmt.Fprintf(j.logs, "==> step %d/%d: %s\n", i+1, len(c.Job.Steps), st.Name)
		exit = j.runStep(st)
		if j.stopped() != "" {
			return "failed", exit
		}
		if exit != 0 {
			fmt.Fprintf(j.logs, "==> step %q failed with exit code %d\n", st.Name, exit)
			return "failed", exit
		}
	}
	// Nothing the steps started may still be changing the workspace while
	// the runner reads it for artifacts and caches.
	if err := j.box.Kill(); err != nil {
		return fail("the job's processes could not be stopped: %v", err)
	}
	for _, art := range c.Job.Artifacts {
		if err := j.uploadArtifact(art); err != nil {
			if client.LostLease(err) {
				j.stop("lease lost")
				return "failed", exit
			}
			return fail("artifact %s could not be uploaded: %v", art.Name, err)
		}
		fmt.Fprintf(j.logs, "==> artifact %s uploaded\n", art.Name)
	}
	if c.Job.Cache != nil {
		if err := j.saveCache(); err != nil {
			if client.LostLease(err) {
				j.stop("lease lost")
				return "failed", exit
			}
			fmt.Fprintf(j.logs, "==> cache not saved: %v\n", err)
		}
	}
	return "passed", 0
}

// prepare makes the attempt's isolated directories and fills the
// workspace with the verified source, the cache and the artifacts the job
// needs, then hands it to the slot's user.
func (j *job) prepare(slot int) error {
	c, l := j.claim, j.claim.Lease
	var lim isolate.Limits
	if jl := c.Job.Limits; jl != nil {
		lim = isolate.Limits{MemoryBytes: jl.MemoryBytes, Pids: jl.Processes, CPUs: jl.CPUs}
		if !j.a.cfg.Isolation.Enforced() {
			fmt.Fprintf(j.logs, "==> the job's limits are not enforced: this runner makes no cgroups (it does not run as root)\n")
		}
	}
	box, err := j.a.cfg.Isolation.NewBox(slot, filepath.Join(j.a.cfg.WorkDir, l.RunID, l.JobID, l.LeaseID), lim)
	if err != nil {
		return fmt.Errorf("the runner could not isolate the job, no step was run: %w", err)
	}
	j.box, j.ws = box, box.Workspace()
	if err := j.fetchSource(); err != nil {
		return fmt.Errorf("source could not be verified, no step was run: %w", err)
	}
	if c.Job.Cache != nil {
		if err := j.restoreCache(); err != nil {
			fmt.Fprintf(j.logs, "==> cache not restored: %v\n", err)
		}
	}
	for _, na := range c.Job.NeedArtifacts {
		b, err := j.a.cfg.Client.FetchArtifact(j.ctx, l, na.Job, na.Name)
		if err == nil {
			err = j.unpackInto(b.URL, b.Digest, b.Size, "")
		}
		if err != nil {
			return fmt.Errorf("artifact %s of %s could not be fetched: %w", na.Name, na.Job, err)
		}
		fmt.Fprintf(j.logs, "==> artifact %s from %s\n", na.Name, na.Job)
	}
	// Each tree was checked alone; links of two together can lead out.
	if err := snapshot.CheckLinks(j.ws); err != nil {
		return fmt.Errorf("the workspace's symlinks lead outside it once the cache and artifacts are merged in, no step was run: %w", err)
	}
	if err := j.box.HandOver(); err != nil {
		return fmt.Errorf("the workspace could not be handed to the job's user: %w", err)
	}
	return nil
}

func looksSecret(name string) bool {
	n := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
