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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forgeci/forgeci/runner/client"
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
	if err := os.MkdirAll(a.cfg.WorkDir, 0o700); err != nil {
		return err
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
		a.runJob(claim)
	}
}

// job is one job being run.
type job struct {
	a      *Agent
	claim  *domain.Claim
	ws     string
	logs   *logAppender
	ctx    context.Context
	cancel context.CancelFunc

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

func (a *Agent) runJob(c *domain.Claim) {
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

	outcome, exitCode := j.execute(log)

	close(hbDone)
	reason := j.stopped()
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	if reason == "lease lost" || reason == "runner shutting down" {
		// No longer ours (or deliberately abandoned): report nothing more.
		log.Warn("job stopped without reporting", "reason", reason)
		a.removeWorkspace(l)
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
	if err := j.logs.Close(fctx); err != nil && client.LostLease(err) {
		log.Warn("lease lost while flushing logs")
		a.removeWorkspace(l)
		return
	}
	if err := a.cfg.Client.Complete(fctx, l, outcome, exitCode, why); err != nil {
		log.Warn("complete failed", "err", err)
	} else {
		log.Info("completed", "outcome", outcome, "exit_code", exitCode)
	}
	a.removeWorkspace(l)
}

// removeWorkspace deletes this lease's workspace, then the job's and the
// run's directories only if nothing else is using them: the next attempt
// of the same job may already be running here (a retry claimed by another
// slot the moment this one completed), and so may other jobs of the run.
func (a *Agent) removeWorkspace(l domain.Lease) {
	jobDir := filepath.Join(a.cfg.WorkDir, l.RunID, l.JobID)
	_ = os.RemoveAll(filepath.Join(jobDir, l.LeaseID))
	_ = os.Remove(jobDir)
	_ = os.Remove(filepath.Dir(jobDir))
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
func (j *job) execute(log *slog.Logger) (string, int) {
	c := j.claim
	l := c.Lease
	j.ws = filepath.Join(j.a.cfg.WorkDir, l.RunID, l.JobID, l.LeaseID)
	if err := os.MkdirAll(filepath.Dir(j.ws), 0o700); err == nil {
		err = os.Mkdir(j.ws, 0o755)
	}
	fail := func(format string, args ...any) (string, int) {
		fmt.Fprintf(j.logs, "==> "+format+"\n", args...)
		return "failed", -1
	}
	if err := j.fetchSource(); err != nil {
		if j.stopped() != "" {
			return "failed", -1
		}
		return fail("source could not be verified, no step was run: %v", err)
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
			return fail("artifact %s of %s could not be fetched: %v", na.Name, na.Job, err)
		}
		fmt.Fprintf(j.logs, "==> artifact %s from %s\n", na.Name, na.Job)
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

// runStep runs one step with bash -eo pipefail in its own process group.
// When the job is stopped the whole group gets SIGTERM, then SIGKILL after
// the grace period.
func (j *job) runStep(st domain.Step) int {
	ctx := j.ctx
	if st.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(st.TimeoutSeconds)*time.Second)
		defer cancel()
	}
	cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", st.Run)
	cmd.Dir = j.ws
	cmd.Env = j.env(st)
	cmd.Stdout, cmd.Stderr = j.logs, j.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(j.logs, "==> could not start bash: %v\n", err)
		return 127
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-ctx.Done():
		if j.ctx.Err() == nil {
			fmt.Fprintf(j.logs, "\n==> step timed out after %ds\n", st.TimeoutSeconds)
		} else if errors.Is(j.ctx.Err(), context.DeadlineExceeded) {
			j.stop("timeout")
		}
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case err = <-waited:
		case <-time.After(j.a.cfg.KillGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			err = <-waited
		}
		// Anything the step left running in its group goes too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if err == nil {
			return 124
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code >= 0 {
			return code
		}
		return 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
	}
	if err != nil {
		return 1
	}
	return 0
}

// env is what a step sees: a minimal base, the job's and step's env, and
// FORGECI_* facts. The runner's own environment (and token) is not passed.
func (j *job) env(st domain.Step) []string {
	c := j.claim
	vars := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": j.ws, "LANG": "C.UTF-8", "CI": "true",
		"FORGECI": "true", "FORGECI_RUN_ID": c.Lease.RunID, "FORGECI_JOB_ID": c.Lease.JobID,
		"FORGECI_JOB_NAME": c.Job.Name, "FORGECI_GENERATION": fmt.Sprint(c.Lease.Generation),
		"FORGECI_WORKSPACE": j.ws,
	}
	if vars["PATH"] == "" {
		vars["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	for k, v := range c.Job.Env {
		vars[k] = v
	}
	for k, v := range st.Env {
		vars[k] = v
	}
	// Secrets last: the pipeline cannot shadow what an admin set.
	for k, v := range c.Secrets {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (j *job) fetchSource() error {
	src, err := j.a.cfg.Client.Source(j.ctx, j.claim.Lease)
	if err != nil {
		if client.LostLease(err) {
			j.stop("lease lost")
		}
		return err
	}
	if src.BlobDigest != j.claim.Source.BlobDigest || src.ManifestDigest != j.claim.Source.ManifestDigest {
		return fmt.Errorf("source route names %s, the claim %s", src.BlobDigest, j.claim.Source.BlobDigest)
	}
	blob, err := j.download(src.URL, src.BlobDigest, src.Size, filepath.Dir(j.ws))
	if err != nil {
		return err
	}
	defer os.Remove(blob)
	m, err := snapshot.ExtractVerified(blob, j.ws, src.ManifestDigest, snapshot.Limits{})
	if err != nil {
		return err
	}
	fmt.Fprintf(j.logs, "==> source %s verified: %d entries, manifest %s\n", src.BlobDigest, len(m), src.ManifestDigest)
	return nil
}

// unpackInto downloads and verifies a blob and merges its tree into the
// workspace (or into sub, relative to it).
func (j *job) unpackInto(url, digest string, size int64, sub string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(j.ws), "unpack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	blob, err := j.download(url, digest, size, tmp)
	if err != nil {
		return err
	}
	tree := filepath.Join(tmp, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return err
	}
	f, err := os.Open(blob)
	if err != nil {
		return err
	}
	_, err = snapshot.Extract(f, tree, snapshot.Limits{})
	f.Close()
	if err != nil {
		return err
	}
	return merge(tree, filepath.Join(j.ws, sub))
}

// merge moves everything under src into dst, keeping what dst has.
func merge(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Rename(s, d); err != nil {
				return err
			}
		case err == nil && fi.IsDir() && e.IsDir():
			if err := merge(s, d); err != nil {
				return err
			}
		}
	}
	return nil
}

func (j *job) restoreCache() error {
	cs := j.claim.Job.Cache
	hit, err := j.a.cfg.Client.RestoreCache(j.ctx, j.claim.Lease, append([]string{cs.Key}, cs.RestoreKeys...))
	if err != nil || hit == nil {
		if err == nil {
			fmt.Fprintf(j.logs, "==> no cache for %s\n", cs.Key)
		}
		return err
	}
	if err := j.unpackInto(hit.URL, hit.Digest, hit.Size, ""); err != nil {
		return err
	}
	fmt.Fprintf(j.logs, "==> cache restored from %s\n", hit.Key)
	return nil
}

// pack snapshots the given workspace paths into a temporary blob.
func (j *job) pack(paths []string) (string, *snapshot.Result, error) {
	tree := &snapshot.Tree{Root: j.ws}
	for _, p := range paths {
		p = filepath.Clean(strings.TrimSuffix(p, "/"))
		full := filepath.Join(j.ws, p)
		err := filepath.Walk(full, func(path string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(j.ws, path)
			if fi.IsDir() {
				tree.Dirs = append(tree.Dirs, filepath.ToSlash(rel))
			} else {
				tree.Paths = append(tree.Paths, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return "", nil, fmt.Errorf("path %s: %w", p, err)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(j.ws), "pack-*.tar.zst")
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	res, err := snapshot.Write(f, tree)
	if err != nil {
		os.Remove(f.Name())
		return "", nil, err
	}
	return f.Name(), res, nil
}

func (j *job) upload(u client.Upload, blob string, size int64) error {
	if u.Exists || u.KeyExists {
		return nil
	}
	// Blobs are content-addressed and written with If-None-Match, so a PUT
	// whose answer was lost is safe to repeat: it then gets 412, "exists".
	return j.transfer(func() error {
		f, err := os.Open(blob)
		if err != nil {
			return err
		}
		defer f.Close()
		return j.a.cfg.Client.Put(j.ctx, u, f, size)
	})
}

// download fetches a blob by its presigned URL and verifies it, retrying
// what a flaky network does to it: one dropped connection must not fail
// the job. A blob that does not match its digest is not retried.
func (j *job) download(url, digest string, size int64, dir string) (string, error) {
	var blob string
	err := j.transfer(func() error {
		var err error
		blob, err = snapshot.Download(j.ctx, http.DefaultClient, url, digest, size, dir)
		return err
	})
	return blob, err
}

// transferAttempts bounds the tries of one presigned download or upload.
const transferAttempts = 5

// transfer runs one S3 transfer with retries and backoff while the job
// goes on; a digest mismatch is final.
func (j *job) transfer(op func() error) error {
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || attempt == transferAttempts || errors.Is(err, snapshot.ErrDigestMismatch) || j.ctx.Err() != nil {
			return err
		}
		select {
		case <-j.ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(delay*2, 4*time.Second)
	}
}

func (j *job) uploadArtifact(art domain.ArtifactSpec) error {
	blob, res, err := j.pack(art.Paths)
	if err != nil {
		return err
	}
	defer os.Remove(blob)
	l := j.claim.Lease
	u, err := j.a.cfg.Client.StartArtifact(j.ctx, l, art.Name, res.BlobDigest, res.Size)
	if err == nil {
		err = j.upload(u, blob, res.Size)
	}
	if err == nil {
		err = j.a.cfg.Client.CommitArtifact(j.ctx, l, art.Name, res.BlobDigest, res.Size)
	}
	return err
}

func (j *job) saveCache() error {
	cs := j.claim.Job.Cache
	var present []string
	for _, p := range cs.Paths {
		if _, err := os.Lstat(filepath.Join(j.ws, p)); err == nil {
			present = append(present, p)
		}
	}
	if len(present) == 0 {
		fmt.Fprintf(j.logs, "==> cache paths do not exist; nothing saved\n")
		return nil
	}
	blob, res, err := j.pack(present)
	if err != nil {
		return err
	}
	defer os.Remove(blob)
	l := j.claim.Lease
	u, err := j.a.cfg.Client.StartCache(j.ctx, l, cs.Key, res.BlobDigest, res.Size)
	if err != nil {
		return err
	}
	if u.KeyExists {
		fmt.Fprintf(j.logs, "==> cache %s exists; not saved again\n", cs.Key)
		return nil
	}
	if err := j.upload(u, blob, res.Size); err != nil {
		return err
	}
	if err := j.a.cfg.Client.CommitCache(j.ctx, l, cs.Key, res.BlobDigest, res.Size); err != nil {
		return err
	}
	fmt.Fprintf(j.logs, "==> cache saved as %s\n", cs.Key)
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
