package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ownPidsMax is what a step reads as its cgroup's pids.max (v1 pids
// hierarchy, or pure v2).
const ownPidsMax = `p=$(awk -F: '$2 == "pids" {print $3}' /proc/self/cgroup)
if [ -n "$p" ]; then cat "/sys/fs/cgroup/pids$p/pids.max"; else cat "/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)/pids.max"; fi`

// TestDefaultPids: with DefaultPids, a job with no limit of processes
// still has one, DefaultPids of this machine and the runner's cgroups; a
// limit the runner was given wins, and without DefaultPids there is none.
func TestDefaultPids(t *testing.T) {
	users := needRoot(t, 2)
	for _, c := range []struct {
		name    string
		cfg     Config
		want    string
		enforce int
	}{
		{"default", Config{DefaultPids: true}, "", -1}, // DefaultPids of the machine and the runner's groups
		{"given", Config{DefaultPids: true, Limits: Limits{Pids: 100}}, "100", 100},
		{"none", Config{}, "max", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Mode, cfg.SlotUsers = User, users
			i, err := New(cfg, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(i.Close)
			if c.enforce == -1 {
				c.enforce = DefaultPids(2, MachinePids(), i.cgroups.PidsCeiling())
				c.want = strconv.Itoa(c.enforce)
			}
			if got := i.Limits().Pids; got != c.enforce {
				t.Fatalf("the runner's limit of processes is %d, want %d", got, c.enforce)
			}
			out, code := step(t, newBox(t, i, 1, workDir(t)), ownPidsMax)
			if code != 0 || strings.TrimSpace(out) != c.want {
				t.Fatalf("the step's pids.max: %q (exit %d), want %s", out, code, c.want)
			}
		})
	}
}

func TestDefaultPidsShares(t *testing.T) {
	for _, c := range []struct{ slots, machine, ceiling, want int }{
		{1, 32768, 0, 8192},      // capped
		{2, 32768, 0, 8192},      // half the machine's, shared
		{4, 32768, 0, 4096},      //
		{2, 4194304, 4505, 1126}, // a systemd unit's TasksMax (15% of 30k) binds
		{1, 32768, 100000, 8192}, // a ceiling above the machine's does not
		{1000, 4194304, 0, 2097}, //
		{1000, 32768, 0, 256},    // the floor
		{0, 32768, 0, 8192},      // no slots counts as one
	} {
		if got := DefaultPids(c.slots, c.machine, c.ceiling); got != c.want {
			t.Errorf("DefaultPids(%d, %d, %d) = %d, want %d", c.slots, c.machine, c.ceiling, got, c.want)
		}
	}
}

// TestPidsCeiling: the tightest pids.max at or above the jobs' base, in a
// hybrid tree where the runner's unit has TasksMax=4505.
func TestPidsCeiling(t *testing.T) {
	root := fakeTree(t, "unified/cgroup.procs", "memory/cgroup.procs", "pids/cgroup.procs", "cpu/cgroup.procs")
	own := map[string]string{"": "/system.slice/forgeci-runner.service", "memory": "/", "cpu": "/",
		"pids": "/system.slice/forgeci-runner.service"}
	l, err := DetectLayout(root, own, "forgeci-runner-1")
	if err != nil {
		t.Fatal(err)
	}
	for file, v := range map[string]string{
		"pids/system.slice/forgeci-runner.service/forgeci-runner-1/pids.max": "max",
		"pids/system.slice/forgeci-runner.service/pids.max":                  "4505",
		"pids/system.slice/pids.max":                                         "max",
	} {
		if err := os.WriteFile(filepath.Join(root, file), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.PidsCeiling(); got != 4505 {
		t.Fatalf("ceiling %d, want 4505", got)
	}
}
