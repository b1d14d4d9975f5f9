package isolate

import (
	"strconv"
	"strings"
	"testing"
)

// ownPidsMax is what a step reads as its cgroup's pids.max (v1 pids
// hierarchy, or pure v2).
const ownPidsMax = `p=$(awk -F: '$2 == "pids" {print $3}' /proc/self/cgroup)
if [ -n "$p" ]; then cat "/sys/fs/cgroup/pids$p/pids.max"; else cat "/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)/pids.max"; fi`

// TestDefaultPids: with DefaultPids, a job with no limit of processes
// still has one, DefaultPids(slots); a limit the runner was given wins,
// and without DefaultPids there is none.
func TestDefaultPids(t *testing.T) {
	users := needRoot(t, 2)
	for _, c := range []struct {
		name    string
		cfg     Config
		want    string
		enforce int
	}{
		{"default", Config{DefaultPids: true}, strconv.Itoa(DefaultPids(2)), DefaultPids(2)},
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
	one, many := DefaultPids(1), DefaultPids(1000)
	if one < 256 || one > 8192 || many != 256 || DefaultPids(4) > one {
		t.Fatalf("DefaultPids: 1 slot %d, 4 slots %d, 1000 slots %d", one, DefaultPids(4), many)
	}
}
