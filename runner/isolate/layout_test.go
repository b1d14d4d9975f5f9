package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The cgroup layouts on fake trees: the files a layout writes are the
// interface, so a tree of plain files shows what each code path does on a
// machine this test does not run on (pure v2 here; the hybrid layout is
// also exercised for real by the root tests).

func fakeTree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return string(b)
}

func TestLayoutPureV2(t *testing.T) {
	root := fakeTree(t, "cgroup.controllers", "system.slice/r.service/cgroup.procs")
	own := map[string]string{"": "/system.slice/r.service"}
	l, err := DetectLayout(root, own, "forgeci-runner-1")
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(root, "system.slice/r.service")
	if !l.V2Controllers || l.V2 != filepath.Join(unit, "forgeci-runner-1") || len(l.V1) != 0 {
		t.Fatalf("layout %+v", l)
	}
	// The runner moved itself into a leaf, so that its unit's group may
	// pass the controllers down, and the base passes them on.
	if got := read(t, filepath.Join(unit, "runner", "cgroup.procs")); got != "0" {
		t.Fatalf("the runner did not move into its leaf: %q", got)
	}
	for _, dir := range []string{unit, l.V2} {
		if got := read(t, filepath.Join(dir, "cgroup.subtree_control")); got != "+cpu" {
			t.Fatalf("%s subtree_control ends %q", dir, got)
		}
	}
	g, err := l.NewGroup("job-a", Limits{MemoryBytes: 1 << 30, Pids: 64, CPUs: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(l.V2, "job-a")
	for file, want := range map[string]string{"memory.max": "1073741824", "memory.swap.max": "0", "pids.max": "64", "cpu.max": "150000 100000"} {
		if got := read(t, filepath.Join(job, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if got := g.ProcsFiles(); len(got) != 1 || got[0] != filepath.Join(job, "cgroup.procs") {
		t.Fatalf("procs files %v", got)
	}
	if hit := g.LimitHit(); hit != "" {
		t.Fatalf("no event yet, but %q", hit)
	}
	os.WriteFile(filepath.Join(job, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 0o644)
	if hit := g.LimitHit(); !strings.Contains(hit, "memory limit of 1073741824 bytes") {
		t.Fatalf("an OOM kill reads %q", hit)
	}
	os.WriteFile(filepath.Join(job, "memory.events"), []byte("oom_kill 0\n"), 0o644)
	os.WriteFile(filepath.Join(job, "pids.events"), []byte("max 2\n"), 0o644)
	if hit := g.LimitHit(); !strings.Contains(hit, "limit of 64 processes") {
		t.Fatalf("a refused fork reads %q", hit)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(job, "cgroup.kill")); got != "1" {
		t.Fatalf("cgroup.kill = %q", got)
	}
}

func TestLayoutPureV2AtTheRoot(t *testing.T) {
	root := fakeTree(t, "cgroup.controllers")
	l, err := DetectLayout(root, map[string]string{"": "/"}, "forgeci-runner-1")
	if err != nil {
		t.Fatal(err)
	}
	// The root group is exempt from the no-internal-processes rule: the
	// runner stays where it is.
	if _, err := os.Stat(filepath.Join(root, "runner")); err == nil {
		t.Fatal("a runner in the root group moved itself")
	}
	if got := read(t, filepath.Join(root, "cgroup.subtree_control")); got != "+cpu" {
		t.Fatalf("root subtree_control ends %q", got)
	}
	if l.V2 != filepath.Join(root, "forgeci-runner-1") {
		t.Fatalf("base %s", l.V2)
	}
}

func TestLayoutHybrid(t *testing.T) {
	root := fakeTree(t, "unified/cgroup.procs", "memory/cgroup.procs", "pids/cgroup.procs", "cpu/cgroup.procs")
	own := map[string]string{"": "/", "memory": "/box", "pids": "/", "cpu": "/"}
	l, err := DetectLayout(root, own, "forgeci-runner-1")
	if err != nil {
		t.Fatal(err)
	}
	if l.V2Controllers || l.V2 != filepath.Join(root, "unified", "forgeci-runner-1") {
		t.Fatalf("layout %+v", l)
	}
	if l.V1["memory"] != filepath.Join(root, "memory", "box", "forgeci-runner-1") {
		t.Fatalf("the memory group is not beneath the runner's own: %s", l.V1["memory"])
	}
	g, err := l.NewGroup("job-a", Limits{MemoryBytes: 1 << 20, Pids: 8, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"memory/box/forgeci-runner-1/job-a/memory.limit_in_bytes":       "1048576",
		"memory/box/forgeci-runner-1/job-a/memory.memsw.limit_in_bytes": "1048576",
		"pids/forgeci-runner-1/job-a/pids.max":                          "8",
		"cpu/forgeci-runner-1/job-a/cpu.cfs_period_us":                  "100000",
		"cpu/forgeci-runner-1/job-a/cpu.cfs_quota_us":                   "50000",
	} {
		if got := read(t, filepath.Join(root, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if n := len(g.ProcsFiles()); n != 4 {
		t.Fatalf("a process joins %d groups, want the v2 one and three v1", n)
	}
	os.WriteFile(filepath.Join(root, "memory/box/forgeci-runner-1/job-a/memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 0o644)
	if hit := g.LimitHit(); !strings.Contains(hit, "2 processes killed") {
		t.Fatalf("an OOM kill reads %q", hit)
	}
}

func TestLayoutRefusesWhatCannotHold(t *testing.T) {
	// Hybrid without the memory controller: a memory limit must be an
	// error, not a job without one.
	root := fakeTree(t, "unified/cgroup.procs", "pids/cgroup.procs")
	l, err := DetectLayout(root, map[string]string{"": "/"}, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.NewGroup("j", Limits{MemoryBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "memory controller is not mounted") {
		t.Fatalf("a memory limit without the controller: %v", err)
	}
	if _, err := DetectLayout(t.TempDir(), map[string]string{"": "/"}, "b"); err == nil {
		t.Fatal("no cgroup hierarchy was accepted")
	}
}

func TestReapStale(t *testing.T) {
	// The dead runners: a PID no process holds; this process's PID, but
	// another start (the PID was another runner's before).
	reused := "forgeci-runner-" + itoa(os.Getpid()) + "-1"
	root := fakeTree(t, "unified/cgroup.procs", "pids/cgroup.procs",
		"unified/forgeci-runner-999999999/job-x/cgroup.procs", "pids/forgeci-runner-999999999/job-x/cgroup.procs",
		"unified/"+reused+"/job-y/cgroup.procs")
	self := RunnerGroup(os.Getpid())
	l, err := DetectLayout(root, map[string]string{"": "/"}, self)
	if err != nil {
		t.Fatal(err)
	}
	if n := l.ReapStale(); n != 2 {
		t.Fatalf("reaped %d jobs, want the dead runners' two", n)
	}
	if got := read(t, filepath.Join(root, "unified/forgeci-runner-999999999/job-x/cgroup.kill")); got != "1" {
		t.Fatalf("the stale job was not killed: %q", got)
	}
	if _, err := os.Stat(l.V2); err != nil {
		t.Fatalf("the live runner's own base went: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestTighter(t *testing.T) {
	runner := Limits{MemoryBytes: 4 << 30, Pids: 0, CPUs: 2}
	for _, tc := range []struct{ job, want Limits }{
		{Limits{}, runner},
		{Limits{MemoryBytes: 1 << 30}, Limits{MemoryBytes: 1 << 30, CPUs: 2}},
		{Limits{MemoryBytes: 8 << 30, Pids: 100, CPUs: 0.5}, Limits{MemoryBytes: 4 << 30, Pids: 100, CPUs: 0.5}},
	} {
		if got := runner.Tighter(tc.job); got != tc.want {
			t.Errorf("runner %+v, job %+v: %+v, want %+v", runner, tc.job, got, tc.want)
		}
	}
}
