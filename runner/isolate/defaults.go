package isolate

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Default limits. A job is a stranger's program: unbounded, one job's fork
// bomb takes every PID of the machine (the runner then cannot start a
// thread to heartbeat, nor another job a process), and one job's memory,
// files in its own /dev/shm or /run/lock included (tmpfs pages that no
// process owns, which the kernel's OOM killer cannot free by killing the
// writer), makes the kernel kill another job's processes or the runner. In a job's memory cgroup those pages count against the job, and
// the job alone pays for going over.

// applyDefaults sets the limits the runner was not given, where its
// Config asks for defaults and the cgroups have the controller; where they
// have not, it says so in Warning.
func (i *Isolator) applyDefaults(l *Layout, slots int) {
	warn := func(s string) { i.Warning = strings.TrimPrefix(i.Warning+"; "+s, "; ") }
	if i.cfg.DefaultPids && i.cfg.Limits.Pids == 0 {
		if l.Controls("pids") {
			i.cfg.Limits.Pids = DefaultPids(slots, MachinePids(), int(l.ceiling("pids", "pids.max", "pids.max")))
		} else {
			warn("no pids controller: jobs have no limit of processes")
		}
	}
	if i.cfg.DefaultMemory && i.cfg.Limits.MemoryBytes == 0 {
		if l.Controls("memory") {
			i.cfg.Limits.MemoryBytes = DefaultMemory(slots, MachineMemory(), l.ceiling("memory", "memory.max", "memory.limit_in_bytes"))
		} else {
			warn("no memory controller: jobs have no limit of memory")
		}
	}
}

// DefaultPids is the processes (threads included) one job may have by
// default: together the slots' jobs take at most half of what the machine
// and the runner's own cgroups (a systemd unit's TasksMax) allow, leaving
// the rest to the runner; one job at least 256 and at most 8192.
func DefaultPids(slots, machine, ceiling int) int {
	budget := machine
	if ceiling > 0 && ceiling < budget {
		budget = ceiling
	}
	return max(256, min(8192, budget/2/max(slots, 1)))
}

// MachinePids is the lower of kernel.pid_max and kernel.threads-max.
func MachinePids() int {
	machine := 0
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		if b, err := os.ReadFile(f); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && (machine == 0 || n < machine) {
				machine = n
			}
		}
	}
	if machine == 0 {
		machine = 32768 // Linux's default pid_max
	}
	return machine
}

// DefaultMemory is the memory one job may use by default: the machine's
// memory, or the runner's own cgroups' limit (a systemd unit's MemoryMax,
// a container's) when lower, less what the runner and the system keep (an
// eighth, at least 512 MiB), shared among the slots, in whole MiB; at
// least 256 MiB.
// A runner of one slot gives its job nearly all of the machine, as a
// machine of its own would.
func DefaultMemory(slots int, machine, ceiling int64) int64 {
	budget := machine
	if ceiling > 0 && (ceiling < budget || budget <= 0) {
		budget = ceiling
	}
	keep := max(512<<20, budget/8)
	// Whole MiB: the kernel rounds a limit to pages, and what the runner
	// says a job has should be what holds.
	return max(256<<20, (budget-keep)/int64(max(slots, 1))) &^ (1<<20 - 1)
}

// MachineMemory is the machine's memory (MemTotal), 0 if unknown.
func MachineMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kib int64
		if n, _ := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kib); n == 1 {
			return kib << 10
		}
	}
	return 0
}
