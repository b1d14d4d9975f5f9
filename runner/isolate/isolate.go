// Package isolate keeps a job's steps away from the runner and from other
// jobs. Every pull request is a program run on someone's machine: a step
// must not read the runner's token or another job's environment, signal the
// runner, outlive its job, or take the machine's memory.
//
// Modes:
//   - none: steps run as the runner's own user (the only mode without
//     root); a job still gets its own cgroup when the runner may make one.
//   - user: each concurrency slot runs steps as its own unprivileged user,
//     in a private mount namespace whose /proc shows only that user's
//     processes (hidepid=2), and each job in a cgroup of its own.
//   - bwrap: user, and the step inside a bubblewrap sandbox where only the
//     workspace and a fresh /tmp are writable and the runner's files are
//     not there at all.
package isolate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Mode is how far steps are kept from the runner and from each other.
type Mode string

// The modes.
const (
	None  Mode = "none"
	User  Mode = "user"
	Bwrap Mode = "bwrap"
)

// Limits of one job (zero: none).
type Limits struct {
	MemoryBytes int64
	Pids        int
	CPUs        float64
}

// Tighter is, for each limit, the tighter of l and o (zero is none).
func (l Limits) Tighter(o Limits) Limits {
	pick := func(a, b float64) float64 {
		if a == 0 || (b != 0 && b < a) {
			return b
		}
		return a
	}
	return Limits{
		MemoryBytes: int64(pick(float64(l.MemoryBytes), float64(o.MemoryBytes))),
		Pids:        int(pick(float64(l.Pids), float64(o.Pids))),
		CPUs:        pick(l.CPUs, o.CPUs),
	}
}

// Enforced reports whether jobs' limits hold (the runner makes cgroups).
func (i *Isolator) Enforced() bool { return i.cgroups != nil }

// Config of a runner's isolation.
type Config struct {
	Mode Mode
	// SlotUsers are the users steps run as, one per concurrency slot
	// (user and bwrap).
	SlotUsers []string
	Limits    Limits
	// DefaultPids, with no Limits.Pids, and DefaultMemory, with no
	// Limits.MemoryBytes, give each job a share of the machine where the
	// runner makes cgroups (defaults.go).
	DefaultPids, DefaultMemory bool
	// CgroupRoot is where cgroup hierarchies are mounted (default
	// /sys/fs/cgroup); CgroupBase names this runner's groups under them.
	CgroupRoot, CgroupBase string
}

// Isolator applies a Config. New checks everything it needs once, so that a
// mode that cannot be had is a clear error at start, never a silent
// downgrade.
type Isolator struct {
	cfg     Config
	slots   []slotUser
	cgroups *Layout // nil: no cgroups (a runner that is not root)
	bwrap   string
	bash    string
	// Warning, when set, is what the runner should log at start.
	Warning string
}

type slotUser struct {
	name     string
	uid, gid int
}

// New prepares isolation for slots concurrency slots.
func New(cfg Config, slots int) (*Isolator, error) {
	if cfg.Mode == "" {
		cfg.Mode = DefaultMode()
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.CgroupBase == "" {
		cfg.CgroupBase = RunnerGroup(os.Getpid())
	}
	i := &Isolator{cfg: cfg}
	if err := closeInheritedFDs(); err != nil {
		return nil, fmt.Errorf("mark inherited descriptors close-on-exec (Linux 5.11 or later): %w", err)
	}
	root := os.Geteuid() == 0
	switch cfg.Mode {
	case None:
		if root {
			i.Warning = "isolation none: steps run as root, the runner's own user: they can read its token and every other job"
		} else {
			i.Warning = "isolation none: steps run as the runner's own user (run the runner as root for per-slot users and cgroups)"
		}
	case User, Bwrap:
		if !root {
			return nil, fmt.Errorf("isolation %s needs the runner to run as root (it switches each slot's steps to that slot's user)", cfg.Mode)
		}
		if len(cfg.SlotUsers) < slots {
			return nil, fmt.Errorf("isolation %s needs one user per slot: %d slots, %d slot users (infra/install-runner.sh makes forgeci-slot0..N; or set slot-users)",
				cfg.Mode, slots, len(cfg.SlotUsers))
		}
		var err error
		if i.slots, err = lookupSlotUsers(cfg.SlotUsers[:slots]); err != nil {
			return nil, err
		}
		if err := keyringsWork(); err != nil {
			i.Warning = fmt.Sprintf("keyrings are not available here (%v): steps cannot use them either", err)
		}
		for _, tool := range []string{"setpriv", "unshare", "mount", "sh", "env"} {
			if _, err := exec.LookPath(tool); err != nil {
				return nil, fmt.Errorf("isolation %s needs %s (util-linux)", cfg.Mode, tool)
			}
		}
	default:
		return nil, fmt.Errorf("unknown isolation %q: use none, user or bwrap", cfg.Mode)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, errors.New("steps need bash, which is not on the PATH")
	}
	if i.bash, err = filepath.Abs(bash); err != nil {
		return nil, err
	}
	if cfg.Mode == Bwrap {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, errors.New("isolation bwrap needs bubblewrap, which is not installed (apt-get install bubblewrap)")
		}
		i.bwrap = p
	}
	if root {
		l, err := DetectLayout(cfg.CgroupRoot, OwnCgroups(), cfg.CgroupBase)
		if err != nil && cfg.Mode != None {
			return nil, fmt.Errorf("isolation %s: %w", cfg.Mode, err)
		}
		i.cgroups = l
		if l != nil {
			i.applyDefaults(l, slots)
			if n := l.ReapStale(); n > 0 {
				i.Warning = strings.TrimPrefix(i.Warning+fmt.Sprintf("; killed what %d jobs of runners no longer running had left", n), "; ")
			}
		}
	} else if cfg.Limits != (Limits{}) {
		return nil, errors.New("job limits need cgroups, which need the runner to run as root")
	}
	return i, nil
}

// Limits are the runner's limits of every job.
func (i *Isolator) Limits() Limits { return i.cfg.Limits }

// DefaultMode is user for a runner running as root, none otherwise.
func DefaultMode() Mode {
	if os.Geteuid() == 0 {
		return User
	}
	return None
}

// Mode is the mode in force.
func (i *Isolator) Mode() Mode { return i.cfg.Mode }

// lookupSlotUsers looks the slot users up. A uid and its group are what
// tell one slot's steps from another's (files, processes, the
// identity-token socket): two slots must never share either.
func lookupSlotUsers(names []string) ([]slotUser, error) {
	var out []slotUser
	uids, gids := map[int]string{}, map[int]string{}
	for _, name := range names {
		su, err := lookupUser(name)
		if err != nil {
			return nil, err
		}
		if other, dup := uids[su.uid]; dup {
			return nil, fmt.Errorf("slot users %q and %q are the same user (uid %d): each slot needs a user of its own", other, name, su.uid)
		}
		if other, dup := gids[su.gid]; dup {
			return nil, fmt.Errorf("slot users %q and %q share their group (gid %d): each slot needs a group of its own (useradd --user-group)", other, name, su.gid)
		}
		uids[su.uid], gids[su.gid] = name, name
		out = append(out, su)
	}
	return out, nil
}

func lookupUser(name string) (slotUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return slotUser{}, fmt.Errorf("slot user %q: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 || gid == 0 {
		return slotUser{}, fmt.Errorf("slot user %q is root: steps must run as an unprivileged user", name)
	}
	if uid == os.Geteuid() {
		return slotUser{}, fmt.Errorf("slot user %q is the runner's own user", name)
	}
	return slotUser{name: name, uid: uid, gid: gid}, nil
}

// Close removes the runner's cgroup base directories (empty by then).
func (i *Isolator) Close() {
	if i.cgroups == nil {
		return
	}
	for _, dir := range i.cgroups.V1 {
		_ = os.Remove(dir)
	}
	_ = os.Remove(i.cgroups.V2)
}

func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// mkdirOwned makes dir (mode 0700) owned by su, or by the runner if su is
// the zero slot.
func mkdirOwned(dir string, su slotUser) error {
	if err := mkdirMode(dir, 0o700); err != nil {
		return err
	}
	if su.uid != 0 {
		return os.Chown(dir, su.uid, su.gid)
	}
	return nil
}

// mkdirMode makes dir with exactly perm, whatever the umask (a root umask
// of 077 would otherwise shut slot users out of their attempts).
func mkdirMode(dir string, perm os.FileMode) error {
	if err := os.Mkdir(dir, perm); err != nil {
		return err
	}
	return os.Chmod(dir, perm)
}

// chownTree hands a tree to su without following symlinks.
func chownTree(dir string, su slotUser) error {
	if su.uid == 0 {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, su.uid, su.gid)
	})
}

// Probe runs a step that does nothing through every slot's isolation, in
// a scratch attempt under dir, so that a mode this machine cannot give
// (no user namespaces for bubblewrap, a cgroup that cannot be joined) is
// an error at start rather than every job failing.
func (i *Isolator) Probe(dir string) error {
	for slot := range max(len(i.slots), 1) {
		b, err := i.NewBox(slot, filepath.Join(dir, fmt.Sprintf("probe-%d-%d", os.Getpid(), slot)), Limits{})
		if err != nil {
			return fmt.Errorf("isolation %s: %w", i.cfg.Mode, err)
		}
		err = b.HandOver()
		var cmd *exec.Cmd
		if err == nil {
			cmd, err = b.Command("exit 0", []string{"PATH=" + rootPath})
		}
		if err == nil {
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err = b.Start(cmd); err == nil {
				err = cmd.Wait()
			}
			if err != nil {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
			}
		}
		b.Close()
		if err != nil {
			return fmt.Errorf("isolation %s does not work here (slot %d): %w", i.cfg.Mode, slot, err)
		}
	}
	return nil
}

// CheckWorkDir reports an error unless slot users can reach their
// workspaces under dir: every directory above it must let others through
// (x for others), and it must not be under /tmp, /var/tmp or /dev/shm,
// which each job sees as its own.
func (i *Isolator) CheckWorkDir(dir string) error {
	if i.cfg.Mode == None {
		return nil
	}
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	for _, private := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		if abs == private || strings.HasPrefix(abs, private+"/") {
			return fmt.Errorf("work directory %s is under %s, which each job sees as its own under isolation %s: choose another --work-dir (such as /var/lib/forgeci-runner/work)", dir, private, i.cfg.Mode)
		}
	}
	for d := abs; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("work directory %s: slot users cannot pass through %s (mode %v); chmod o+x it or choose another --work-dir", dir, d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
