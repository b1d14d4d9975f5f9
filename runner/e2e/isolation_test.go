package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestJobIsolation is issue 15's end-to-end attack: with the real runner
// (as root, as CI runs it: slot users, cgroups), one job tries to read the
// runner's token, stop the runner, leave a process behind, read the
// environment of another job running beside it and print a secret split
// across log flushes. Every one fails, and the stored log holds no secret.
func TestJobIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("job isolation needs the runner to run as root (CI runs as root)")
	}
	s := start(t)
	const secret = "split-secret-value-9731"
	cmd := exec.Command(filepath.Join(s.bin, "forgeci"), "secret", "set", "--project", "e2e", "--name", "SPLIT_SECRET")
	cmd.Env = append(os.Environ(), "FORGECI_URL="+s.vals["FORGECI_URL"], "FORGECI_TOKEN="+s.vals["FORGECI_TOKEN"])
	cmd.Stdin = strings.NewReader(secret + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("secret set: %v %s", err, out)
	}
	ch := s.channel(t)
	runner := s.runner.Process.Pid
	marker := fmt.Sprint(400000 + time.Now().UnixNano()%500000)
	yml := fmt.Sprintf(`jobs:
  attacker:
    runs-on: linux
    secrets: [SPLIT_SECRET]
    steps:
      - run: |
          for i in $(seq 600); do [ -f %[1]s/victim-ready ] && break; sleep 0.05; done
          { cat %[2]s; cat /proc/%[3]d/cmdline /proc/%[3]d/environ; } > %[1]s/token 2>&1 || true
          kill -STOP %[3]d 2>> %[1]s/signal || echo refused >> %[1]s/signal
          kill -TERM %[3]d 2>> %[1]s/signal || echo refused >> %[1]s/signal
          setsid sleep %[4]s > /dev/null 2>&1 < /dev/null &
          nohup sleep %[4]s > /dev/null 2>&1 &
          for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null; done | grep victim-env > %[1]s/env || true
          printf 'the secret: split-secr'
          sleep 0.7
          printf 'et-value-9731 and its base64: %%s\n' "$(printf %%s "$SPLIT_SECRET" | base64)"
          touch %[1]s/attacker-done
  victim:
    runs-on: linux
    env: {VICTIM_MARK: victim-env-4242}
    steps:
      - run: touch %[1]s/victim-ready; for i in $(seq 600); do [ -f %[1]s/attacker-done ] && break; sleep 0.05; done
`, ch, filepath.Join(s.dir, "runner.token"), runner, marker)
	id, err := s.submit(writePipeline(t, yml), false)
	if err != nil {
		t.Fatal(err)
	}
	v := s.waitRun(id, func(v runView) bool { return v.State == "PASSED" || v.State == "FAILED" }, 90*time.Second)
	if v.State != "PASSED" {
		t.Fatalf("run %s: %+v\nrunner log:\n%s", v.State, v.Jobs, s.runnerLog())
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(ch, name))
		if err != nil {
			t.Fatalf("the attacker did not get to %s: %v", name, err)
		}
		return string(b)
	}
	if got := read("token"); strings.Contains(got, s.token) || strings.Contains(got, "frt_") || strings.Contains(got, "forgeci-runner") {
		t.Errorf("the step read the runner's token or command line:\n%s", got)
	}
	if got := read("signal"); strings.Count(got, "refused") != 2 {
		t.Errorf("the step signalled the runner:\n%s", got)
	}
	if st := procState(runner); st == "" || st == "T" {
		t.Errorf("the runner is %q after the attack", st)
	}
	if got := read("env"); strings.Contains(got, "victim-env-4242") {
		t.Errorf("the step read the other job's environment:\n%s", got)
	}
	if n := countSleeps(marker); n != 0 {
		t.Errorf("%d processes the job left behind still run", n)
	}
	checkJobLimit(t, s)
	stored := storedLog(t, s, id, "attacker")
	if !strings.Contains(stored, "the secret: ***") {
		t.Errorf("the split secret was not masked in the stored log:\n%s", stored)
	}
	if strings.Contains(stored, "split-secr") || strings.Contains(stored, "c3BsaXQtc2VjcmV0LXZhbHVlLTk3MzE") {
		t.Errorf("the stored log holds the secret:\n%s", stored)
	}
}

// checkJobLimit: a job's own memory limit holds, and the job fails saying
// so.
func checkJobLimit(t *testing.T, s *stack) {
	id, err := s.submit(writePipeline(t, "jobs:\n  hog:\n    runs-on: linux\n    limits: {memory: 48M}\n    steps:\n      - run: head -c 268435456 /dev/zero | tail -c 268435456 > /dev/null\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	v := s.waitRun(id, func(v runView) bool { return v.State == "FAILED" || v.State == "PASSED" }, 60*time.Second)
	if j := v.Jobs[0]; j.State != "FAILED" || !strings.Contains(j.Reason, "memory limit of 50331648 bytes") {
		t.Errorf("a job over its memory limit: %+v", j)
	}
}

func (s *stack) runnerLog() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "runner.log"))
	return string(b)
}

// procState is the state letter of pid ("" if it is gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func countSleeps(marker string) int {
	n := 0
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "sleep\x00"+marker) {
			n++
		}
	}
	return n
}

// storedLog is a job's log as the database holds it: what the runner sent,
// before the control plane masks it again for display.
func storedLog(t *testing.T, s *stack, runID, job string) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.vals["FORGECI_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var log string
	err = c.QueryRow(ctx, `
		SELECT coalesce(string_agg(convert_from(l.data, 'UTF8'), '' ORDER BY l.generation, l.start_offset), '')
		FROM log_chunks l JOIN jobs j ON j.id = l.job_id WHERE j.run_id = $1 AND j.name = $2`, runID, job).Scan(&log)
	if err != nil {
		t.Fatal(err)
	}
	return log
}
