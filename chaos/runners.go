package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// runnerProc is one forgeci-runner process slot: one registered runner,
// whose process the harness kills, stops, resumes and restarts.
type runnerProc struct {
	h                           *Harness
	idx                         int
	id, bin                     string
	tokenFile, workDir, logFile string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool // SIGSTOPped
	dead    bool // killed, not yet restarted
	busy    bool // a fault is acting on it
}

func (r *runnerProc) start() error {
	logf, err := os.OpenFile(r.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	args := []string{"run", "--server", r.h.runnerProxy.URL(), "--token-file", r.tokenFile,
		"--work-dir", r.workDir, "--concurrency", strconv.Itoa(r.h.cfg.Concurrency), "--kill-grace", "1s"}
	cmd := exec.Command(r.bin, append(args, r.isolation()...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start runner %d: %w", r.idx, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	r.cmd, r.exited, r.dead, r.stopped = cmd, exited, false, false
	return nil
}

// claimForFault marks the runner as taken by a fault if it is running.
func (r *runnerProc) claimForFault() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy || r.dead || r.stopped {
		return false
	}
	r.busy = true
	return true
}

// sigkill kills the process as a power cut would and restarts it after
// down, in the background. It returns when the restart is scheduled.
func (r *runnerProc) sigkill(down time.Duration) {
	r.mu.Lock()
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	exited := r.exited
	r.dead = true
	r.mu.Unlock()
	<-exited
	r.endAfter(down, "sigkill", "", func() {
		if r.dead {
			_ = r.start()
		}
	})
}

// endAfter ends a fault on r after d (or when the fault phase ends), in
// the background, with r locked, and logs it from now until then.
func (r *runnerProc) endAfter(d time.Duration, fault, detail string, end func()) {
	start := time.Now()
	r.h.bg.Add(1)
	go func() {
		defer r.h.bg.Done()
		r.h.wait(d)
		r.mu.Lock()
		defer r.mu.Unlock()
		end()
		r.busy = false
		r.h.ops.add(Op{Kind: "fault", Fault: fault, Target: r.id, T: start.UnixNano(), End: time.Now().UnixNano(), Detail: detail})
	}()
}

// sigstop freezes the process for d, then resumes it, in the background.
func (r *runnerProc) sigstop(d time.Duration) {
	r.mu.Lock()
	_ = r.cmd.Process.Signal(syscall.SIGSTOP)
	r.stopped = true
	r.mu.Unlock()
	r.endAfter(d, "sigstop", d.Round(time.Millisecond).String(), func() {
		if r.stopped {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			r.stopped = false
		}
	})
}

// revive resumes a stopped process and restarts a dead one, at once.
func (r *runnerProc) revive() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		r.stopped = false
	}
	if r.dead {
		_ = r.start()
	}
}

// stop asks the runner to finish (SIGTERM: no new claims) and kills it if
// it has not exited in a few seconds.
func (r *runnerProc) stop() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (r *runnerProc) kill() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// isolation gives each runner process its own slot users (runners on one
// machine must not share them: a slot's user is what keeps its jobs
// apart; a step's kill -1 reaches every process of its user), from those
// scripts/deps.sh makes; without enough of them, or
// without root, the runner runs steps unisolated.
func (r *runnerProc) isolation() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	var users []string
	for k := range r.h.cfg.Concurrency {
		// From forgeci-slot2: the end-to-end tests, which may run at the
		// same time, use slot0 and slot1.
		name := fmt.Sprintf("forgeci-slot%d", 2+r.idx*r.h.cfg.Concurrency+k)
		if _, err := user.Lookup(name); err != nil {
			return []string{"--isolation", "none"}
		}
		users = append(users, name)
	}
	return []string{"--slot-users", strings.Join(users, ",")}
}

// runnerWorkDir is runner i's work directory: outside /tmp for a runner
// running as root, which gives each job a /tmp of its own.
func runnerWorkDir(dir string, i int) string {
	if os.Geteuid() == 0 && strings.HasPrefix(dir, "/tmp/") {
		return filepath.Join("/var/lib", "forgeci-chaos-"+filepath.Base(dir), fmt.Sprintf("work-%d", i))
	}
	return filepath.Join(dir, fmt.Sprintf("work-%d", i))
}

// startRunners builds the runner (unless given), registers the runners
// and starts their processes.
func (h *Harness) startRunners(ctx context.Context, dir string) error {
	bin := h.cfg.RunnerBin
	if bin == "" {
		h.progress("building forgeci-runner")
		bin = filepath.Join(dir, "forgeci-runner")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/forgeci/forgeci/runner/cmd/forgeci-runner").CombinedOutput()
		if err != nil {
			return fmt.Errorf("build forgeci-runner: %v\n%s", err, out)
		}
	}
	for i := range h.cfg.Runners {
		reg, _, err := h.st.CreateRegistrationToken(ctx, time.Hour, "chaos", store.Scope{Untrusted: true})
		if err != nil {
			return err
		}
		id, token, err := h.st.RegisterRunner(ctx, reg, fmt.Sprintf("chaos-%d", i), []string{"linux"})
		if err != nil {
			return err
		}
		h.tokens[token] = id
		r := &runnerProc{h: h, idx: i, id: id, bin: bin,
			tokenFile: filepath.Join(dir, fmt.Sprintf("runner-%d.token", i)),
			workDir:   runnerWorkDir(dir, i),
			logFile:   filepath.Join(dir, fmt.Sprintf("runner-%d.log", i))}
		if err := os.WriteFile(r.tokenFile, []byte(token+"\n"), 0o600); err != nil {
			return err
		}
		if err := r.start(); err != nil {
			return err
		}
		h.runners = append(h.runners, r)
	}
	return nil
}
