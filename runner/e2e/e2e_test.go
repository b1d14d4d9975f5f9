// Package e2e runs the real binaries end to end: forgeci dev (PostgreSQL,
// versitygw, every handler, the sweeper), real forgeci-runner processes
// executing real shell steps, and forgeci submit.
package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type stack struct {
	t      *testing.T
	dir    string
	bin    string
	vals   map[string]string
	runner *exec.Cmd
	token  string
}

func build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	for pkg, name := range map[string]string{"../../cmd/forgeci": "forgeci", "../cmd/forgeci-runner": "forgeci-runner"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	return bin
}

func start(t *testing.T) *stack { return startWith(t) }

// startWith starts the stack with extra environment for forgeci dev.
func startWith(t *testing.T, devEnv ...string) *stack {
	if testing.Short() {
		t.Skip("end to end")
	}
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	s := &stack{t: t, dir: dir, bin: build(t, dir), vals: map[string]string{}}
	info := filepath.Join(dir, "info")
	dev := exec.Command(filepath.Join(s.bin, "forgeci"), "dev", "--addr", "127.0.0.1:0", "--info", info,
		"--sweep-every", "300ms", "--lease-ttl", "3s")
	dev.Env = append(os.Environ(), devEnv...)
	devLog, _ := os.Create(filepath.Join(dir, "dev.log"))
	dev.Stdout, dev.Stderr = devLog, devLog
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Process.Signal(syscall.SIGINT); _ = dev.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for len(s.vals) < 4 {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "dev.log"))
			t.Fatalf("dev did not start:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
		if f, err := os.Open(info); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if k, v, ok := strings.Cut(sc.Text(), "="); ok {
					s.vals[k] = v
				}
			}
			f.Close()
		}
	}
	// The projects the tests submit to (runs never create projects).
	for _, name := range []string{"e2e", "cli"} {
		cmd := exec.Command(filepath.Join(s.bin, "forgeci"), "project", "create", name)
		cmd.Env = append(os.Environ(), "FORGECI_URL="+s.vals["FORGECI_URL"], "FORGECI_TOKEN="+s.vals["FORGECI_TOKEN"])
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("project create %s: %v %s", name, err, out)
		}
	}
	tokenFile := filepath.Join(dir, "runner.token")
	if out, err := exec.Command(filepath.Join(s.bin, "forgeci-runner"), "register", "--server", s.vals["FORGECI_URL"],
		"--registration-token", s.vals["FORGECI_REGISTRATION_TOKEN"], "--name", "e2e", "--labels", "linux",
		"--token-file", tokenFile).CombinedOutput(); err != nil {
		t.Fatalf("register: %v %s", err, out)
	}
	b, _ := os.ReadFile(tokenFile)
	s.token = strings.TrimSpace(string(b))
	s.startRunner()
	return s
}

func (s *stack) startRunner() { s.startRunnerN(2) }

func (s *stack) startRunnerN(concurrency int) {
	cmd := exec.Command(filepath.Join(s.bin, "forgeci-runner"), "run", "--server", s.vals["FORGECI_URL"],
		"--token-file", filepath.Join(s.dir, "runner.token"), "--work-dir", s.workDir(), "--concurrency", strconv.Itoa(concurrency),
		"--kill-grace", "1s")
	logf, _ := os.OpenFile(filepath.Join(s.dir, "runner.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.runner = cmd
	s.t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
}

// workDir is the runner's work directory: as root (CI) the runner runs
// each slot's steps as its own user with a /tmp of its own, so workspaces
// live outside /tmp.
func (s *stack) workDir() string {
	if os.Geteuid() != 0 {
		return filepath.Join(s.dir, "work")
	}
	dir := filepath.Join("/var/lib", "forgeci-e2e-"+filepath.Base(filepath.Dir(s.dir))+"-"+filepath.Base(s.dir))
	if err := os.MkdirAll(dir, 0o711); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// channel is a directory a test's steps can write to for the test to
// read: as root, steps run as slot users with a /tmp of their own, so it
// is outside /tmp and writable by anyone.
func (s *stack) channel(t *testing.T) string {
	if os.Geteuid() != 0 {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/var/lib", "forgeci-e2e-channel-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// submit submits dir as the admin and returns the run ID.
func (s *stack) submit(dir string, follow bool) (string, error) {
	return s.submitWith(dir, follow, s.vals["FORGECI_TOKEN"])
}

// submitAs submits dir as the user of token and returns the run ID.
func (s *stack) submitAs(dir, token string) (string, error) { return s.submitWith(dir, false, token) }

func (s *stack) submitWith(dir string, follow bool, token string) (string, error) {
	args := []string{"submit", "--dir", dir, "--project", "e2e", "--json"}
	if follow {
		args = append(args, "--follow")
	}
	cmd := exec.Command(filepath.Join(s.bin, "forgeci"), args...)
	cmd.Env = append(os.Environ(), "FORGECI_URL="+s.vals["FORGECI_URL"], "FORGECI_TOKEN="+token)
	out, err := cmd.Output()
	if follow {
		return string(out), err
	}
	var run struct{ ID string }
	if jerr := json.Unmarshal(out, &run); jerr != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", jerr
	}
	return run.ID, err
}

type runView struct {
	State          string
	SourceDigest   string `json:"source_digest"`
	ManifestDigest string `json:"manifest_digest"`
	SourceSize     int64  `json:"source_size"`
	Jobs           []struct {
		ID, Name, State, Reason string
		Generation              int
	}
}

func (s *stack) run(id string) runView {
	req, _ := http.NewRequest("GET", s.vals["FORGECI_URL"]+"/v1/runs/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+s.vals["FORGECI_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v runView
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return v
}

func (s *stack) log(runID, jobID string) string { return s.logGen(runID, jobID, 0) }

func (s *stack) logGen(runID, jobID string, gen int) string {
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/runs/%s/jobs/%s/logs?generation=%d", s.vals["FORGECI_URL"], runID, jobID, gen), nil)
	req.Header.Set("Authorization", "Bearer "+s.vals["FORGECI_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (s *stack) waitRun(id string, done func(runView) bool, within time.Duration) runView {
	deadline := time.Now().Add(within)
	for {
		v := s.run(id)
		if done(v) {
			return v
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "runner.log"))
			var failed strings.Builder
			for _, j := range v.Jobs {
				if j.State == "FAILED" {
					log := s.log(id, j.ID)
					fmt.Fprintf(&failed, "log of failed job %s:\n%s\n", j.Name, log[max(0, len(log)-2048):])
				}
			}
			s.t.Fatalf("run %s did not get there: %+v\n%srunner log:\n%s", id, v, failed.String(), b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func writePipeline(t *testing.T, yml string) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".forgeci.yml"), []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func states(v runView) map[string]string {
	m := map[string]string{}
	for _, j := range v.Jobs {
		m[j.Name] = j.State
	}
	return m
}

func TestEndToEnd(t *testing.T) {
	s := start(t)

	t.Run("example pipeline passes", func(t *testing.T) {
		out, err := s.submit("../..", true)
		if err != nil || !strings.Contains(out, "[publish] built from") || !strings.Contains(out, "PASSED") {
			t.Fatalf("example run: %v\n%s", err, out)
		}
	})

	t.Run("failing step fails the job and skips dependants", func(t *testing.T) {
		id, err := s.submit(writePipeline(t, "jobs:\n  a:\n    runs-on: linux\n    steps:\n      - run: echo about to fail; exit 3\n  b:\n    runs-on: linux\n    needs: [a]\n    steps: [{run: echo never}]\n"), false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "FAILED" }, 60*time.Second)
		if st := states(v); st["a"] != "FAILED" || st["b"] != "SKIPPED" {
			t.Fatalf("states %v", st)
		}
		for _, j := range v.Jobs {
			if j.Name == "a" && j.Reason != "exit_code 3" {
				t.Fatalf("reason %q", j.Reason)
			}
		}
	})

	t.Run("steps: id, if, outputs, continue-on-error, shell, working-directory", testStepFeatures(s))
	t.Run("steps: $GITHUB_ENV and $GITHUB_PATH carry into the later steps", testEnvFiles(s))
	t.Run("flow: job if, outputs, needs, continue-on-error, fail-fast, runner expressions", testFlow(s))
	t.Run("concurrency: cancel-in-progress cancels the running run", testConcurrency(s))
	t.Run("deployments: reviews in the dashboard, branch rules, environment secrets", testDeployments(s))
	t.Run("identity tokens from the job's socket, verified with go-oidc", testIDTokens(s))
	t.Run("manual run with inputs", testManualRun(s))
	t.Run("artifacts: list and download with the CLI", testArtifactsCLI(s))
	t.Run("test reports: summed up, kept, shown", testReports(s))
	t.Run("starter workflows", testWorkflows(s))
	t.Run("actions/checkout: nothing to fetch, the run's commit and ref as outputs", testCheckout(s))

	t.Run("timeout fails the job with a reason", func(t *testing.T) {
		// timeout-minutes is whole minutes, so this waits one minute.
		id, err := s.submit(writePipeline(t, "jobs:\n  slow:\n    runs-on: linux\n    timeout-minutes: 1\n    steps:\n      - run: echo start; sleep 600\n"), false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "FAILED" }, 100*time.Second)
		if j := v.Jobs[0]; j.State != "FAILED" || j.Reason != "timeout" {
			t.Fatalf("job %+v", j)
		}
		log := s.log(id, v.Jobs[0].ID)
		if !strings.Contains(log, "start") || !strings.Contains(log, "job timed out after 1 minutes") {
			t.Fatalf("log does not say it timed out:\n%s", log)
		}
	})

	t.Run("cancel mid-step kills the process group; always() and cancelled() jobs still run", func(t *testing.T) {
		tmp := s.channel(t)
		id, err := s.submit(writePipeline(t, "jobs:\n  long:\n    runs-on: linux\n    steps:\n      - run: |\n          sleep 300 &\n          echo $! > "+tmp+"/child\n          echo $$ > "+tmp+"/shell\n          wait\n  after:\n    runs-on: linux\n    needs: [long]\n    steps: [{run: echo never}]\n"+
			"  cleanup:\n    runs-on: linux\n    needs: [long]\n    if: always()\n    steps: [{run: echo cleaning up}]\n"+
			"  on-cancel:\n    runs-on: linux\n    needs: [after]\n    if: cancelled()\n    steps: [{run: echo canceled}]\n"), false)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		deadline := time.Now().Add(60 * time.Second)
		for len(pids) < 2 {
			pids = pids[:0]
			for _, f := range []string{"shell", "child"} {
				b, err := os.ReadFile(filepath.Join(tmp, f))
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
					pids = append(pids, pid)
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("step never started")
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, pid := range pids {
			if !alive(pid) {
				t.Fatalf("pid %d not running before cancel", pid)
			}
		}
		req, _ := http.NewRequest("POST", s.vals["FORGECI_URL"]+"/v1/runs/"+id+"/cancel", nil)
		req.Header.Set("Authorization", "Bearer "+s.vals["FORGECI_TOKEN"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("cancel: %v %v", resp, err)
		}
		resp.Body.Close()
		v := s.waitRun(id, func(v runView) bool { return v.State == "CANCELED" }, 30*time.Second)
		// A run's cancel leaves the jobs whose if: calls always() or
		// cancelled(): they run once their needs have ended.
		if st := states(v); st["long"] != "CANCELED" || st["after"] != "CANCELED" || st["cleanup"] != "PASSED" || st["on-cancel"] != "PASSED" {
			t.Fatalf("states %v", st)
		}
		for _, pid := range pids {
			if alive(pid) {
				t.Fatalf("pid %d of the canceled step is still running", pid)
			}
		}
	})

	t.Run("kill -9 of the runner: job ABORTED, not resumed", func(t *testing.T) {
		marker := filepath.Join(s.channel(t), "started")
		id, err := s.submit(writePipeline(t, "jobs:\n  long:\n    runs-on: linux\n    steps:\n      - run: touch "+marker+"; sleep 30\n"), false)
		if err != nil {
			t.Fatal(err)
		}
		waitForFile(t, marker, "step never started")
		attempts := filepath.Join(s.workDir(), id, s.run(id).Jobs[0].ID)
		if entries, err := os.ReadDir(attempts); err != nil || len(entries) != 1 {
			t.Fatalf("the running attempt's directory: %v %v", entries, err)
		}
		_ = s.runner.Process.Signal(syscall.SIGKILL)
		_, _ = s.runner.Process.Wait()
		v := s.waitRun(id, func(v runView) bool { return v.State == "ABORTED" }, 30*time.Second)
		if j := v.Jobs[0]; j.State != "ABORTED" || j.Reason != "lease_expired" {
			t.Fatalf("job %+v", j)
		}
		s.startRunner()
		// The killed runner's workspace (and its steps' environment, with
		// any secrets) is removed by the next runner on the directory.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(s.workDir(), id)); os.IsNotExist(err) {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the killed runner's attempt is still there: %v", err)
			}
		}
		time.Sleep(2 * time.Second)
		if v := s.run(id); v.Jobs[0].State != "ABORTED" {
			t.Fatalf("a restarted runner resumed the job: %+v", v)
		}
	})

	t.Run("SIGSTOP past the lease: the retried generation wins, the stale runner is fenced", func(t *testing.T) {
		tmp := s.channel(t)
		// Runner A runs one job at a time: with a second slot, its pending
		// long-poll would claim the retried generation on the server while
		// the process is stopped (correct, but not this test).
		_ = s.runner.Process.Kill()
		_, _ = s.runner.Process.Wait()
		s.startRunnerN(1)
		a := s.runner
		id, err := s.submit(writePipeline(t, "jobs:\n  flaky:\n    runs-on: linux\n    retry: {lease-lost: 1}\n    steps:\n      - run: |\n          echo gen-$FORGECI_GENERATION-start\n          touch "+tmp+"/started-$FORGECI_GENERATION\n          sleep 4\n          echo gen-$FORGECI_GENERATION-end\n"), false)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(tmp, "started-1")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("generation 1 never started")
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // let gen-1-start reach the log
		if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer a.Process.Signal(syscall.SIGCONT) //nolint:errcheck
		s.waitRun(id, func(v runView) bool { return v.Jobs[0].Generation == 1 && v.Jobs[0].State == "QUEUED" }, 30*time.Second)
		s.startRunner() // runner B, same identity, new process
		s.waitRun(id, func(v runView) bool { return v.Jobs[0].Generation == 2 && v.Jobs[0].State == "RUNNING" }, 30*time.Second)
		time.Sleep(4500 * time.Millisecond) // A's gen-1 step has ended; its output waits in the stopped runner
		if err := a.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)
		jobID := v.Jobs[0].ID
		time.Sleep(time.Second) // give the resumed runner time to try everything it had queued
		if gen2 := s.logGen(id, jobID, 2); !strings.Contains(gen2, "gen-2-end") || strings.Contains(gen2, "gen-1") {
			t.Fatalf("generation 2 log:\n%s", gen2)
		}
		if gen1 := s.logGen(id, jobID, 1); !strings.Contains(gen1, "gen-1-start") || strings.Contains(gen1, "gen-1-end") {
			t.Fatalf("the stale runner's output after its lease was lost got in:\n%s", gen1)
		}
		if v := s.run(id); v.Jobs[0].State != "PASSED" || v.Jobs[0].Generation != 2 {
			t.Fatalf("the stale runner changed the job: %+v", v.Jobs[0])
		}
	})

}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}
