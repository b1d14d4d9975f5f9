package isolate

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The attacks of issue 15 on real processes: steps run as the slot users
// scripts/deps.sh makes, in real cgroups. They need root, as CI has.

func needRoot(t *testing.T, users int) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("isolation needs root (CI runs as root): run the suite as root to exercise slot users and cgroups")
	}
	var names []string
	for i := range users {
		// forgeci-slot8 on: other packages' runners, which may run at the
		// same time, use slot0 to slot7 (a step's kill -1 here reaches
		// every process of its user).
		name := fmt.Sprintf("forgeci-slot%d", 8+i)
		if _, err := user.Lookup(name); err != nil {
			t.Fatalf("slot user %s is missing: scripts/deps.sh makes it (make test runs it)", name)
		}
		names = append(names, name)
	}
	return names
}

// workDir is a runner's work directory outside /tmp (each job has a /tmp
// of its own), removed after the test.
func workDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/lib", "forgeci-isolate-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newIsolator(t *testing.T, mode Mode, slots int, lim Limits) *Isolator {
	t.Helper()
	users := needRoot(t, slots)
	i, err := New(Config{Mode: mode, SlotUsers: users, Limits: lim}, slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(i.Close)
	return i
}

func newBox(t *testing.T, i *Isolator, slot int, dir string) *Box {
	t.Helper()
	b, err := i.NewBox(slot, filepath.Join(dir, fmt.Sprintf("run/job/lease-%d-%d", slot, time.Now().UnixNano())), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.HandOver(); err != nil {
		t.Fatal(err)
	}
	return b
}

// step runs script in b and returns its output and exit code.
func step(t *testing.T, b *Box, script string, env ...string) (string, int) {
	t.Helper()
	cmd, err := b.Command(script, append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + b.TmpDir()}, env...))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A file, not a pipe: what a step leaves running may hold its output.
	cmd.Stdout, cmd.Stderr = f, f
	if err = b.Start(cmd); err == nil {
		err = cmd.Wait()
	}
	b2, _ := os.ReadFile(f.Name())
	out.Write(b2)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

var modes = []Mode{User, Bwrap}

// hold runs setup in b with env, then keeps the step running until the
// test ends; it returns once setup is done.
func hold(t *testing.T, b *Box, setup string, env ...string) {
	t.Helper()
	cmd, err := b.Command(setup+"\ntouch $TMPDIR/ready; sleep 30", append([]string{"PATH=/usr/bin:/bin", "TMPDIR=" + b.TmpDir()}, env...))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Kill(); cmd.Wait() })
	for range 500 {
		if _, err := os.Stat(filepath.Join(b.TmpDir(), "ready")); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the holding step did not start")
}

func TestStepCannotReachTheRunner(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 1, Limits{})
			dir := workDir(t)
			token := filepath.Join(dir, "token")
			os.WriteFile(token, []byte("frt_the_runners_token"), 0o600)
			b := newBox(t, i, 0, dir)
			me := strconv.Itoa(os.Getpid())
			out, _ := step(t, b, `
cat `+token+` || echo "token: refused"
cat /proc/`+me+`/cmdline /proc/`+me+`/environ || echo "proc: refused"
kill -0 `+me+` || echo "signal: refused"
ls `+dir+` || echo "list: refused"
id -u
grep NoNewPrivs /proc/self/status
kill -KILL -1
`)
			if strings.Contains(out, "frt_the_runners_token") || strings.Contains(out, "forgeci") && strings.Contains(out, "test.v") {
				t.Fatalf("the step read the runner's token or command line:\n%s", out)
			}
			want := []string{"token: refused", "proc: refused", "signal: refused"}
			if mode == User {
				// (bwrap shows the path to the workspace, and nothing
				// else of the runner's directory.)
				want = append(want, "list: refused")
			}
			if strings.Contains(out, "\ntoken\n") {
				t.Fatalf("the step listed the runner's directory:\n%s", out)
			}
			for _, want := range want {
				if !strings.Contains(out, want) {
					t.Errorf("%q missing: the step got through:\n%s", want, out)
				}
			}
			if strings.Contains(out, "\n0\n") {
				t.Fatalf("the step ran as root:\n%s", out)
			}
			// Without no_new_privs a setuid program (crontab, at) would
			// let the step leave work behind outside its cgroup.
			if !strings.Contains(out, "NoNewPrivs:\t1\n") {
				t.Fatalf("the step may gain privileges through setuid programs:\n%s", out)
			}
			// kill -1 reached only the step's own processes: this one, the
			// runner, is still here to check.
		})
	}
}

// TestJobsCannotSeeEachOther: two slots at once; one holds a secret in
// its environment, the other looks for it in every process it can see.
func TestJobsCannotSeeEachOther(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 2, Limits{})
			dir := workDir(t)
			a, b := newBox(t, i, 0, dir), newBox(t, i, 1, dir)
			hold(t, a, "true", "SECRET=s3cr3t-of-job-a")
			out, _ := step(t, b, `
for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null | tr '\0' '\n'; done | grep s3cr3t || echo "environ: none"
ls /proc | grep -c '^[0-9]' 
ls `+filepath.Dir(a.Workspace())+` || echo "other: refused"
`)
			if strings.Contains(out, "s3cr3t-of-job-a") || !strings.Contains(out, "environ: none") {
				t.Fatalf("a job read another job's environment:\n%s", out)
			}
			if !strings.Contains(out, "other: refused") {
				t.Fatalf("a job listed another job's attempt:\n%s", out)
			}
		})
	}
}

// TestNothingOutlivesItsJob: setsid, double fork, nohup and disown; all
// gone once the job ends.
func TestNothingOutlivesItsJob(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 1, Limits{})
			b := newBox(t, i, 0, workDir(t))
			marker := fmt.Sprintf("%d", 100000+time.Now().UnixNano()%800000)
			_, code := step(t, b, `
setsid sleep `+marker+` >/dev/null 2>&1 < /dev/null &
( ( sleep `+marker+` >/dev/null 2>&1 & ) & )
nohup sleep `+marker+` >/dev/null 2>&1 &
sleep `+marker+` >/dev/null 2>&1 & disown
sleep 0.2
`)
			if code != 0 {
				t.Fatalf("step exited %d", code)
			}
			// Under bwrap they end with the step's sandbox already (its
			// init kills its PID namespace); as the slot user they run on.
			if n := countProcs("sleep " + marker); mode == User && n != 4 {
				t.Fatalf("%d of the 4 escaped processes run before the job ends", n)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if n := countProcs("sleep " + marker); n != 0 {
				t.Fatalf("%d processes outlived their job", n)
			}
		})
	}
}

func countProcs(cmdline string) int {
	n := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, _ := os.ReadFile(f)
		if string(bytes.ReplaceAll(bytes.TrimRight(b, "\x00"), []byte{0}, []byte{' '})) == cmdline {
			n++
		}
	}
	return n
}

// TestTmpIsTheJobs: /tmp, /var/tmp and /dev/shm are the job's own (user
// mode) or fresh (bwrap), gone with it; the next job on the slot finds
// nothing.
func TestTmpIsTheJobs(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 1, Limits{})
			dir := workDir(t)
			first := newBox(t, i, 0, dir)
			out, code := step(t, first, `echo left > /tmp/left-by-first; echo ok > $TMPDIR/mine; cat /tmp/mine; touch /dev/shm/x 2>/dev/null; ls /tmp`)
			if code != 0 || !strings.Contains(out, "ok") {
				t.Fatalf("TMPDIR and /tmp are not the same place (exit %d):\n%s", code, out)
			}
			if _, err := os.Stat("/tmp/left-by-first"); err == nil {
				os.Remove("/tmp/left-by-first")
				t.Fatal("the step wrote to the machine's /tmp")
			}
			tmp := first.TmpDir()
			first.Close()
			if _, err := os.Stat(tmp); !os.IsNotExist(err) {
				t.Fatalf("the job's TMPDIR outlived it: %v", err)
			}
			second := newBox(t, i, 0, dir)
			out, _ = step(t, second, `cat /tmp/left-by-first /dev/shm/x 2>&1 || echo "nothing left"`)
			if !strings.Contains(out, "nothing left") || strings.Contains(out, "\nleft\n") || strings.HasPrefix(out, "left") {
				t.Fatalf("the next job found the last one's files:\n%s", out)
			}
		})
	}
}

func TestBwrapShowsOnlyTheWorkspace(t *testing.T) {
	i := newIsolator(t, Bwrap, 1, Limits{})
	dir := workDir(t)
	os.WriteFile(filepath.Join(dir, "state"), []byte("runner state"), 0o644)
	b := newBox(t, i, 0, dir)
	out, _ := step(t, b, `
cat `+dir+`/state 2>/dev/null || echo "state: invisible"
touch /usr/x 2>/dev/null || echo "usr: read-only"
touch /etc/x 2>/dev/null || echo "etc: read-only"
touch /var/lib/x 2>/dev/null; ls /var/lib | wc -l
touch ./ws-file && echo "ws: writable"
touch /tmp/t && echo "tmp: writable"
`)
	for _, want := range []string{"state: invisible", "usr: read-only", "etc: read-only", "ws: writable", "tmp: writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing:\n%s", want, out)
		}
	}
}

func TestLimits(t *testing.T) {
	i := newIsolator(t, User, 1, Limits{MemoryBytes: 64 << 20, Pids: 32})
	dir := workDir(t)
	b := newBox(t, i, 0, dir)
	// tail keeps the last 256 MiB it read in memory.
	_, code := step(t, b, `head -c 268435456 /dev/zero | tail -c 268435456 > /dev/null`)
	if code == 0 {
		t.Fatal("a step used 256 MiB under a 64 MiB limit")
	}
	if hit := b.LimitHit(); !strings.Contains(hit, "memory limit") {
		t.Fatalf("the job's reason is %q", hit)
	}
	b = newBox(t, i, 0, dir)
	// perl's fork fails at once where bash's would retry for seconds.
	_, code = step(t, b, `perl -e 'for (1..64) { my $p = fork(); die "fork: $!\n" unless defined $p; if (!$p) { sleep 30; exit } }'`)
	if code == 0 {
		t.Fatal("a step started 64 processes under a limit of 32")
	}
	if hit := b.LimitHit(); !strings.Contains(hit, "limit of 32 processes") {
		t.Fatalf("the job's reason is %q", hit)
	}
}

// TestJobLimitsHold: a job's own limit, tighter than the runner's (none
// here), holds.
func TestJobLimitsHold(t *testing.T) {
	i := newIsolator(t, User, 1, Limits{})
	b, err := i.NewBox(0, filepath.Join(workDir(t), "lease"), Limits{MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.HandOver(); err != nil {
		t.Fatal(err)
	}
	if _, code := step(t, b, `head -c 134217728 /dev/zero | tail -c 134217728 > /dev/null`); code == 0 {
		t.Fatal("a step used 128 MiB under the job's 32 MiB limit")
	}
	if hit := b.LimitHit(); !strings.Contains(hit, "memory limit of 33554432 bytes") {
		t.Fatalf("the job's reason is %q", hit)
	}
}

// TestRootStagesIgnoreTheStepsEnv: the stages that run as root get a
// fixed environment; LD_PRELOAD in a pipeline reaches only the step.
func TestRootStagesIgnoreTheStepsEnv(t *testing.T) {
	i := newIsolator(t, User, 1, Limits{})
	b := newBox(t, i, 0, workDir(t))
	out, code := step(t, b, `echo "preload=$LD_PRELOAD multi=$MULTI"`, "LD_PRELOAD=/nonexistent/evil.so", "MULTI=a'b\"c\nd")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// The step sees its variables exactly; the root stages would have
	// complained about a missing preload object had they seen it (ld.so
	// prints an error and goes on, so look for that).
	if strings.Contains(out, "cannot be preloaded") && strings.Count(out, "cannot be preloaded") > 1 {
		t.Fatalf("a root stage loaded the step's LD_PRELOAD:\n%s", out)
	}
	if !strings.Contains(out, "preload=/nonexistent/evil.so multi=a'b\"c\nd") {
		t.Fatalf("the step's environment did not arrive intact:\n%s", out)
	}
}

// TestSandboxIgnoresTheStepsEnv: bwrap builds the sandbox with a fixed
// environment and the step's is loaded inside it. An LD_PRELOAD of a
// library a step wrote would otherwise run in bwrap before the sandbox
// exists; the loader's debug output shows which programs an environment
// reached.
func TestSandboxIgnoresTheStepsEnv(t *testing.T) {
	i := newIsolator(t, Bwrap, 1, Limits{})
	b := newBox(t, i, 0, workDir(t))
	out, code := step(t, b, `/bin/true; echo "debug=$LD_DEBUG"`, "LD_DEBUG=files")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "needed by /bin/true") || !strings.Contains(out, "debug=files") {
		t.Fatalf("the step's environment did not reach the step:\n%s", out)
	}
	if strings.Contains(out, "bwrap") {
		t.Fatalf("bwrap ran with the step's environment:\n%s", out)
	}
}

func TestNewRefusesWhatItCannotGive(t *testing.T) {
	users := needRoot(t, 1)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: User, SlotUsers: []string{users[0], users[0]}}, "are the same user"},
		{Config{Mode: "jail"}, "unknown isolation"},
		{Config{Mode: User, SlotUsers: nil}, "needs one user per slot"},
		{Config{Mode: User, SlotUsers: []string{"no-such-user-here"}}, `slot user "no-such-user-here"`},
		{Config{Mode: User, SlotUsers: []string{"root"}}, "is root"},
	} {
		if _, err := New(tc.cfg, max(1, len(tc.cfg.SlotUsers))); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	i := newIsolator(t, User, 1, Limits{})
	if err := i.CheckWorkDir("/tmp"); err == nil {
		t.Error("a work directory under /tmp was accepted")
	}
	private, _ := os.MkdirTemp("/var/lib", "forgeci-private-")
	defer os.RemoveAll(private)
	os.Chmod(private, 0o700)
	if err := i.CheckWorkDir(filepath.Join(private)); err == nil {
		t.Error("a work directory slot users cannot reach was accepted")
	}
}

// TestReviewFindings: what a security review of the isolation found, each
// on real processes: a step shares no controlling terminal with the runner
// (TIOCSTI), no System V IPC or /run/lock with the machine or other jobs,
// and no descriptor the runner inherited.
func TestReviewFindings(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			leak, err := syscall.Open("/etc/hostname", syscall.O_RDONLY, 0) // not close-on-exec
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(leak)
			i := newIsolator(t, mode, 2, Limits{})
			dir := workDir(t)
			a, b := newBox(t, i, 0, dir), newBox(t, i, 1, dir)
			hold(t, a, `ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null; { echo left > /run/lock/left-by-a; } 2>/dev/null || true`)
			out, _ := step(t, b, fmt.Sprintf(`
s=$(cut -d' ' -f6 /proc/$$/stat); [ "$s" = "$$" ] && echo "session leader"
{ exec 3</dev/tty; } 2>/dev/null && echo "has a terminal"
echo "shm: $(ipcs -m | grep -c '^0x')" "queues: $(ipcs -q | grep -c '^0x')"
cat /run/lock/left-by-a 2>/dev/null
cat /proc/self/fd/%d 2>/dev/null && echo "inherited fd"
true`, leak))
			for _, bad := range []string{"has a terminal", "left", "inherited fd"} {
				if strings.Contains(out, bad) {
					t.Errorf("%q:\n%s", bad, out)
				}
			}
			// (Under bwrap the step is in a session bwrap made, not its
			// leader; the one outside is ours.)
			if mode == User && !strings.Contains(out, "session leader") {
				t.Errorf("the step is not in a session of its own:\n%s", out)
			}
			if !strings.Contains(out, "shm: 0 queues: 0") {
				t.Errorf("the step sees another job's IPC:\n%s", out)
			}
			host, _ := exec.Command("ipcs", "-m", "-q").Output()
			if strings.Contains(string(host), "forgeci-slot8") {
				t.Errorf("the job's IPC objects are on the machine:\n%s", host)
			}
			if _, err := os.Stat("/run/lock/left-by-a"); err == nil {
				os.Remove("/run/lock/left-by-a")
				t.Error("the job wrote the machine's /run/lock")
			}
		})
	}
}
