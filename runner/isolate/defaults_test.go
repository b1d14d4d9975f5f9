package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ownLimit is the script a step reads its own cgroup's limit of
// controller c with: v1file in the v1 hierarchy of c, or v2file in pure v2.
func ownLimit(c, v1file, v2file string) string {
	return `p=$(awk -F: '$2 == "` + c + `" {print $3}' /proc/self/cgroup)
if [ -n "$p" ]; then cat "/sys/fs/cgroup/` + c + `$p/` + v1file + `"; else cat "/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)/` + v2file + `"; fi`
}

// twoSlots is an isolator of cfg in user mode for two slots.
func twoSlots(t *testing.T, cfg Config, users []string) *Isolator {
	t.Helper()
	cfg.Mode, cfg.SlotUsers = User, users
	i, err := New(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(i.Close)
	return i
}

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
			i := twoSlots(t, c.cfg, users)
			if c.enforce == -1 {
				c.enforce = DefaultPids(2, MachinePids(), int(i.cgroups.ceiling("pids", "pids.max", "pids.max")))
				c.want = strconv.Itoa(c.enforce)
			}
			if got := i.Limits().Pids; got != c.enforce {
				t.Fatalf("the runner's limit of processes is %d, want %d", got, c.enforce)
			}
			out, code := step(t, newBox(t, i, 1, workDir(t)), ownLimit("pids", "pids.max", "pids.max"))
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

// TestCeiling: the tightest pids.max at or above the jobs' base, in a
// hybrid tree where the runner's unit has TasksMax=4505; and of memory,
// where v1's "no limit" is a number near 2^63.
func TestCeiling(t *testing.T) {
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
	if got := l.ceiling("pids", "pids.max", "pids.max"); got != 4505 {
		t.Fatalf("pids ceiling %d, want 4505", got)
	}
	for file, v := range map[string]string{
		"memory/forgeci-runner-1/memory.limit_in_bytes": "9223372036854771712",
		"memory/memory.limit_in_bytes":                  "9223372036854771712",
	} {
		if err := os.WriteFile(filepath.Join(root, file), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.ceiling("memory", "memory.max", "memory.limit_in_bytes"); got != 0 {
		t.Fatalf("memory ceiling %d, want none", got)
	}
	if err := os.WriteFile(filepath.Join(root, "memory/memory.limit_in_bytes"), []byte("4294967296\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := l.ceiling("memory", "memory.max", "memory.limit_in_bytes"); got != 4<<30 {
		t.Fatalf("memory ceiling %d, want 4 GiB", got)
	}
}

// TestDefaultMemory: with DefaultMemory, a job with no memory limit still
// has one, DefaultMemory of this machine and the runner's cgroups; a limit
// the runner was given wins, and without DefaultMemory there is none.
func TestDefaultMemory(t *testing.T) {
	users := needRoot(t, 2)
	for _, c := range []struct {
		name    string
		cfg     Config
		enforce int64 // -1: the default
	}{
		{"default", Config{DefaultMemory: true}, -1},
		{"given", Config{DefaultMemory: true, Limits: Limits{MemoryBytes: 300 << 20}}, 300 << 20},
		{"none", Config{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := twoSlots(t, c.cfg, users)
			if c.enforce == -1 {
				c.enforce = DefaultMemory(2, MachineMemory(), i.cgroups.ceiling("memory", "memory.max", "memory.limit_in_bytes"))
			}
			if got := i.Limits().MemoryBytes; got != c.enforce {
				t.Fatalf("the runner's memory limit is %d, want %d", got, c.enforce)
			}
			out, code := step(t, newBox(t, i, 1, workDir(t)), ownLimit("memory", "memory.limit_in_bytes", "memory.max"))
			got, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
			switch {
			case code != 0:
				t.Fatalf("the step's memory limit: %q (exit %d)", out, code)
			case c.enforce == 0 && !(strings.TrimSpace(out) == "max" || err == nil && got >= 1<<62):
				t.Fatalf("the step's memory limit is %q, want none", out)
			case c.enforce > 0 && got != c.enforce:
				t.Fatalf("the step's memory limit is %q, want %d", out, c.enforce)
			}
		})
	}
}

func TestDefaultMemoryShares(t *testing.T) {
	const gib = int64(1) << 30
	for _, c := range []struct {
		slots            int
		machine, ceiling int64
		want             int64
	}{
		{1, 24 * gib, 0, 21 * gib},             // an eighth kept
		{2, 24 * gib, 0, 21 * gib / 2},         // shared
		{1, 2 * gib, 0, 1536 << 20},            // at least 512 MiB kept
		{2, 16 * gib, 4 * gib, 3584 << 20 / 2}, // a unit's MemoryMax binds
		{1, 4 * gib, 64 * gib, 3584 << 20},     // a ceiling above the machine's does not
		{64, 4 * gib, 0, 256 << 20},            // the floor
		{0, 4 * gib, 0, 3584 << 20},            // no slots counts as one
		{1, 0, 0, 256 << 20},                   // unknown memory: the floor
		{1, 0, 4 * gib, 3584 << 20},            // unknown memory, a known ceiling
	} {
		if got := DefaultMemory(c.slots, c.machine, c.ceiling); got != c.want {
			t.Errorf("DefaultMemory(%d, %d, %d) = %d, want %d", c.slots, c.machine, c.ceiling, got, c.want)
		}
	}
}

// TestTmpfsCountsAgainstTheJob: files a step writes to its /dev/shm or
// /run/lock (tmpfs: pages no process owns, so the kernel's OOM killer
// cannot free them by killing the writer, and would kill others) count
// against the job's memory: the step fails and the job says why.
func TestTmpfsCountsAgainstTheJob(t *testing.T) {
	i := newIsolator(t, User, 1, Limits{MemoryBytes: 64 << 20})
	dir := workDir(t)
	for _, d := range []string{"/dev/shm", "/run/lock"} {
		b := newBox(t, i, 0, dir)
		out, code := step(t, b, `head -c 268435456 /dev/zero > `+d+`/fill; echo "exit $?"; du -sm `+d)
		if code == 0 && strings.Contains(out, "exit 0") {
			t.Fatalf("a step wrote 256 MiB to %s under a 64 MiB limit:\n%s", d, out)
		}
		if hit := b.LimitHit(); !strings.Contains(hit, "memory limit") {
			t.Fatalf("%s: the job's reason is %q (output %q)", d, hit, out)
		}
	}
}
