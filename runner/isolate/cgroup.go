package isolate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroups: every process of a job is in a cgroup of its own, so that the
// job's end kills all of them (setsid, double forks and nohup included)
// and its memory, process and CPU limits hold for all of them.
//
// Two layouts are supported. Pure cgroup v2: one hierarchy with the
// controllers, where the job's group takes membership, kill and limits.
// Hybrid: a controller-less v2 hierarchy (at /sys/fs/cgroup/unified) for
// membership and cgroup.kill, beside cgroup v1 hierarchies for the memory,
// pids and cpu controllers, where the job also gets a group of each for its
// limits.

// Layout is where the cgroup hierarchies are.
type Layout struct {
	// V2 is the cgroup v2 directory jobs' groups go under.
	V2 string
	// V2Controllers: the v2 hierarchy has the controllers (pure v2).
	V2Controllers bool
	// V1 maps a v1 controller (memory, pids, cpu) to the directory its
	// jobs' groups go under (hybrid only).
	V1 map[string]string
}

// DetectLayout finds the cgroup layout under root ("/sys/fs/cgroup" on a
// real machine; tests pass a fake tree) and prepares base, the directory
// of this runner's jobs' groups in each hierarchy, beneath the runner's
// own groups (own, from OwnCgroups) so that limits set above the runner
// still hold for its jobs.
func DetectLayout(root string, own map[string]string, base string) (*Layout, error) {
	l := &Layout{V1: map[string]string{}}
	switch {
	case exists(filepath.Join(root, "cgroup.controllers")):
		l.V2, l.V2Controllers = filepath.Join(root, own[""], base), true
		if err := delegateV2(root, own[""]); err != nil {
			return nil, err
		}
	case exists(filepath.Join(root, "unified", "cgroup.procs")):
		l.V2 = filepath.Join(root, "unified", own[""], base)
		for _, c := range []string{"memory", "pids", "cpu"} {
			if exists(filepath.Join(root, c, "cgroup.procs")) {
				l.V1[c] = filepath.Join(root, c, own[c], base)
			}
		}
	default:
		return nil, fmt.Errorf("no cgroup v2 hierarchy under %s (neither %s/cgroup.controllers nor %s/unified)", root, root, root)
	}
	if err := os.MkdirAll(l.V2, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if l.V2Controllers {
		// The base holds no process, so its children may have the
		// controllers its parent gave it.
		enableControllers(l.V2)
	}
	for c, dir := range l.V1 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", c, err)
		}
	}
	return l, nil
}

// Controls reports whether jobs' groups get controller c (memory, pids,
// cpu).
func (l *Layout) Controls(c string) bool {
	if l.V2Controllers {
		b, _ := os.ReadFile(filepath.Join(l.V2, "cgroup.subtree_control"))
		return slices.Contains(strings.Fields(string(b)), c)
	}
	_, ok := l.V1[c]
	return ok
}

// ceiling is the tightest limit of controller c (its v2 or v1 file) at
// or above the jobs' groups: the runner's own groups and theirs (a
// systemd unit's TasksMax or MemoryMax, a container's); 0 if none. v1's
// "no limit" is a number near 2^63, which no machine's memory reaches.
func (l *Layout) ceiling(c, v2file, v1file string) int64 {
	dir, file := l.V2, v2file
	if !l.V2Controllers {
		dir, file = l.V1[c], v1file
	}
	var ceiling int64
	for ; dir != "" && dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			break // the hierarchy's root has none
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n < 1<<62 && (ceiling == 0 || n < ceiling) {
			ceiling = n
		}
	}
	return ceiling
}

// delegateV2 makes the controllers available below the runner's own v2
// group. A group with processes cannot pass controllers down (the "no
// internal processes" rule), so unless the runner is in the root group
// (which is exempt) it first moves itself into a leaf of its own, as a
// systemd unit with Delegate=yes expects.
func delegateV2(root, own string) error {
	if own == "/" || own == "" {
		enableControllers(root)
		return nil
	}
	dir := filepath.Join(root, own)
	leaf := filepath.Join(dir, "runner")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0o644); err != nil {
		return fmt.Errorf("cgroup: move the runner into %s: %w (is the cgroup delegated? the systemd unit needs Delegate=yes)", leaf, err)
	}
	enableControllers(dir)
	return nil
}

// enableControllers passes memory, pids and cpu to dir's children, each on
// its own: one the kernel lacks must not keep the others away. A limit
// whose controller is missing is refused when a group is made.
func enableControllers(dir string) {
	for _, c := range []string{"memory", "pids", "cpu"} {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0o644)
	}
}

// OwnCgroups maps "" to this process's cgroup v2 path and each v1
// controller to its path, from /proc/self/cgroup.
func OwnCgroups() map[string]string {
	own := map[string]string{"": "/"}
	b, _ := os.ReadFile("/proc/self/cgroup")
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Group is one job's cgroups.
type Group struct {
	v2 string            // the v2 group
	v1 map[string]string // controller -> its v1 group
	// controllers says where memory/pids/cpu files are (v2 or v1).
	controllers bool
	limits      Limits
}

// NewGroup makes the job's groups, with limits.
func (l *Layout) NewGroup(name string, lim Limits) (*Group, error) {
	g := &Group{v2: filepath.Join(l.V2, name), v1: map[string]string{}, controllers: l.V2Controllers, limits: lim}
	if err := os.Mkdir(g.v2, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	for c, dir := range l.V1 {
		g.v1[c] = filepath.Join(dir, name)
		if err := os.Mkdir(g.v1[c], 0o755); err != nil {
			g.Remove()
			return nil, fmt.Errorf("cgroup %s: %w", c, err)
		}
	}
	if err := g.setLimits(); err != nil {
		g.Remove()
		return nil, err
	}
	return g, nil
}

func (g *Group) setLimits() error {
	lim := g.limits
	write := func(ctrl, v2file, v1file, value string) error {
		path := filepath.Join(g.v2, v2file)
		if !g.controllers {
			dir, ok := g.v1[ctrl]
			if !ok {
				return fmt.Errorf("cgroup: the %s controller is not mounted, so the job's %s limit cannot hold", ctrl, ctrl)
			}
			path = filepath.Join(dir, v1file)
		}
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("cgroup: set %s: %w", path, err)
		}
		return nil
	}
	if lim.MemoryBytes > 0 {
		v := strconv.FormatInt(lim.MemoryBytes, 10)
		if err := write("memory", "memory.max", "memory.limit_in_bytes", v); err != nil {
			return err
		}
		if g.controllers { // no swap beyond the limit either
			_ = os.WriteFile(filepath.Join(g.v2, "memory.swap.max"), []byte("0"), 0o644)
		} else {
			_ = os.WriteFile(filepath.Join(g.v1["memory"], "memory.memsw.limit_in_bytes"), []byte(v), 0o644)
		}
	}
	if lim.Pids > 0 {
		if err := write("pids", "pids.max", "pids.max", strconv.Itoa(lim.Pids)); err != nil {
			return err
		}
	}
	if lim.CPUs > 0 {
		const period = 100000
		quota := strconv.Itoa(int(lim.CPUs * period))
		if g.controllers {
			return write("cpu", "cpu.max", "", quota+" "+strconv.Itoa(period))
		}
		if err := write("cpu", "", "cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
			return err
		}
		return write("cpu", "", "cpu.cfs_quota_us", quota)
	}
	return nil
}

// ProcsFiles are the cgroup.procs files a process writes "0" into to join
// every group of the job (the trampoline does, before it drops privileges).
func (g *Group) ProcsFiles() []string {
	files := []string{filepath.Join(g.v2, "cgroup.procs")}
	for _, dir := range g.v1 {
		files = append(files, filepath.Join(dir, "cgroup.procs"))
	}
	return files
}

// Procs lists the processes in the job's group.
func (g *Group) Procs() []int {
	b, _ := os.ReadFile(filepath.Join(g.v2, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// Kill kills every process of the job, whatever it did to get away from
// its parent, and waits (up to a few seconds) for the group to empty.
func (g *Group) Kill() error {
	if err := os.WriteFile(filepath.Join(g.v2, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		// Kernels before 5.14 have no cgroup.kill: signal each member
		// until none is left (new ones can only come from members).
		for range 50 {
			pids := g.Procs()
			if len(pids) == 0 {
				break
			}
			for _, p := range pids {
				_ = killPid(p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 300 {
		if len(g.Procs()) == 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("cgroup: processes of the job are still running after kill")
}

// LimitHit says which limit the job ran into, if any: the reason a job
// that failed then failed.
func (g *Group) LimitHit() string {
	events := func(ctrl, v2file, v1file string) map[string]int64 {
		path := filepath.Join(g.v2, v2file)
		if !g.controllers {
			path = filepath.Join(g.v1[ctrl], v1file)
		}
		return readKeyed(path)
	}
	if g.limits.MemoryBytes > 0 {
		oom := events("memory", "memory.events", "memory.oom_control")["oom_kill"]
		if oom > 0 {
			return fmt.Sprintf("the job's memory limit of %d bytes was reached (%d processes killed)", g.limits.MemoryBytes, oom)
		}
	}
	if g.limits.Pids > 0 && events("pids", "pids.events", "pids.events")["max"] > 0 {
		return fmt.Sprintf("the job's limit of %d processes was reached", g.limits.Pids)
	}
	return ""
}

func readKeyed(path string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = n
		}
	}
	return out
}

// Remove deletes the job's (empty) groups.
func (g *Group) Remove() {
	for _, dir := range g.v1 {
		_ = os.Remove(dir)
	}
	_ = os.Remove(g.v2)
}

// ReapStale kills the jobs a runner that is gone left behind (a runner
// killed, or a machine's runner restarted, cannot have stopped them) and
// removes their groups: the groups beside base named forgeci-runner-PID
// whose PID is no longer running. It returns how many jobs it ended.
func (l *Layout) ReapStale() int {
	n := 0
	parent, self := filepath.Dir(l.V2), filepath.Base(l.V2)
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		pid, ticks, ok := runnerOfGroup(e.Name())
		if !ok || e.Name() == self || !e.IsDir() || runnerAlive(pid, ticks) {
			continue
		}
		jobs, _ := os.ReadDir(filepath.Join(parent, e.Name()))
		for _, j := range jobs {
			if !j.IsDir() {
				continue
			}
			g := &Group{v2: filepath.Join(parent, e.Name(), j.Name()), v1: map[string]string{}}
			for c, dir := range l.V1 {
				g.v1[c] = filepath.Join(filepath.Dir(dir), e.Name(), j.Name())
			}
			_ = g.Kill()
			g.Remove()
			n++
		}
		_ = os.Remove(filepath.Join(parent, e.Name()))
		for _, dir := range l.V1 {
			_ = os.Remove(filepath.Join(filepath.Dir(dir), e.Name()))
		}
	}
	return n
}

// RunnerGroup is the name of a runner's cgroup base: its PID and the
// clock tick after boot it started at, which together name one process
// (a PID alone is reused); its PID alone where the start is unknown.
func RunnerGroup(pid int) string {
	if ticks, ok := processStart(pid); ok {
		return fmt.Sprintf("forgeci-runner-%d-%d", pid, ticks)
	}
	return fmt.Sprintf("forgeci-runner-%d", pid)
}

// runnerOfGroup reads RunnerGroup's name (ticks -1: not in the name, as
// runners before it named their groups).
func runnerOfGroup(name string) (pid int, ticks int64, ok bool) {
	rest, ok := strings.CutPrefix(name, "forgeci-runner-")
	if !ok {
		return 0, 0, false
	}
	p, t, withTicks := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	if err != nil {
		return 0, 0, false
	}
	ticks = -1
	if withTicks {
		if ticks, err = strconv.ParseInt(t, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return pid, ticks, true
}

// runnerAlive is whether pid may be a runner still: a process of root's,
// which started at the clock tick ticks when that is known. Not only that
// the PID is taken: a job orphaned by a runner that died could fork until
// it holds that PID (as its slot user), or another process of root's take
// it (a kernel thread, a daemon's worker), and so keep its group from
// being reaped. Which program root runs is not asked: another runner's
// binary (a test's, an upgrade's) may have another name.
func runnerAlive(pid int, ticks int64) bool {
	fi, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	if err != nil {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		return false
	}
	started, ok := processStart(pid)
	return ticks < 0 || !ok || started == ticks
}

// processStart is the clock tick after boot process pid started at
// (/proc/PID/stat, field 22): with its PID, it names the process.
func processStart(pid int) (int64, bool) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(stat), ')') // the command may hold spaces and parentheses
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return 0, false
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64) // field 22, counted from field 3
	return ticks, err == nil
}
