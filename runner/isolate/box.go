package isolate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Box is one job attempt's isolation: its directories, its user, its
// cgroup. The attempt directory (the runner's, named by the lease ID) holds
// ws (the workspace) and tmp (the job's TMPDIR), owned by the slot's user,
// and steps (the step scripts and environments).
type Box struct {
	i     *Isolator
	su    slotUser // zero: the runner's own user
	dir   string
	group *Group
	steps atomic.Int32
	// shared are files the runner made for the job (its identity-token
	// socket) that its steps reach at the same path.
	shared []string
}

// NewBox prepares an attempt in dir (which must not exist) for slot. job
// are the limits the job asks for; the runner's own hold where tighter.
func (i *Isolator) NewBox(slot int, dir string, job Limits) (*Box, error) {
	b := &Box{i: i, dir: dir}
	if i.cfg.Mode != None {
		b.su = i.slots[slot]
	}
	// An existing directory is another attempt's (a claim naming a lease
	// already running here): it is left alone. What this one made is
	// removed if it fails.
	if err := mkdirAttempt(dir); err != nil {
		return nil, err
	}
	if err := b.fill(job); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

// fill makes the attempt directory's contents and the job's cgroup.
func (b *Box) fill(job Limits) error {
	// The workspace stays the runner's (0700) while the runner fills it;
	// HandOver gives it to the slot's user. Steps' scripts and
	// environments are in the runner's directory, so that no step can
	// make or replace a file there.
	if err := mkdirMode(filepath.Join(b.dir, "ws"), 0o700); err != nil {
		return err
	}
	if err := mkdirOwned(filepath.Join(b.dir, "tmp"), b.su); err != nil {
		return err
	}
	if err := mkdirMode(filepath.Join(b.dir, "steps"), 0o711); err != nil {
		return err
	}
	if b.i.cgroups != nil {
		g, err := b.i.cgroups.NewGroup("job-"+filepath.Base(b.dir), b.i.cfg.Limits.Tighter(job))
		if err != nil {
			return err
		}
		b.group = g
	}
	return nil
}

// Workspace is where steps run.
func (b *Box) Workspace() string { return filepath.Join(b.dir, "ws") }

// TmpDir is the job's TMPDIR, removed with it.
func (b *Box) TmpDir() string { return filepath.Join(b.dir, "tmp") }

// HandOver gives the workspace, filled by the runner (source, caches,
// artifacts), to the slot's user.
func (b *Box) HandOver() error {
	if err := chownTree(b.Workspace(), b.su); err != nil {
		return err
	}
	if b.su.uid == 0 {
		return nil
	}
	return os.Chmod(b.Workspace(), 0o700) // (chown keeps the mode)
}

// Owner is the user ID that owns what the steps write (-1: no slot user,
// the runner's own).
func (b *Box) Owner() int {
	if b.su.uid == 0 {
		return -1
	}
	return b.su.uid
}

// OwnerGroup is the group ID of the slot's user (-1: no slot user).
func (b *Box) OwnerGroup() int {
	if b.su.uid == 0 {
		return -1
	}
	return b.su.gid
}

// Command is a step: bash -e running script (GitHub's default shell), as
// the slot's user, in the job's cgroup (and, for bwrap, its sandbox), with
// exactly env. Start it with Start.
//
// In user and bwrap modes the first stages run as root, so they get a
// fixed environment, never the step's (LD_PRELOAD in a pipeline's env
// must not reach a root process); the step's environment is read from a
// file by a bash that already runs as the slot's user. It is not passed
// on a command line, which every local user can read.
func (b *Box) Command(script string, env []string) (*exec.Cmd, error) {
	return b.StepCommand(Step{Script: script, Env: env})
}

// Step is one step's command: its script; the argv that runs it, with
// {0} for the script's file (nil: bash -e {0}, GitHub's default when a
// step names no shell: without pipefail, as a workflow expects);
// the directory it starts in, relative to the workspace; its environment;
// and the files (NewStepFile) it may write: its outputs, environment and
// path files.
type Step struct {
	Script string
	Shell  []string
	Dir    string
	Env    []string
	Files  []string
}

// StepCommand is Command for a Step.
func (b *Box) StepCommand(st Step) (*exec.Cmd, error) {
	n := strconv.Itoa(int(b.steps.Add(1)))
	stepsDir := filepath.Join(b.dir, "steps")
	file := filepath.Join(stepsDir, "step-"+n+".sh")
	if err := writeOwned(file, []byte(st.Script), b.su); err != nil {
		return nil, fmt.Errorf("step script: %w", err)
	}
	argv := []string{b.i.bash, "-e", file}
	if len(st.Shell) > 0 {
		argv = make([]string, len(st.Shell))
		for i, a := range st.Shell {
			argv[i] = strings.ReplaceAll(a, "{0}", file)
		}
	}
	// The step's directory is entered by the step's own user (the load-env
	// stage, or bwrap inside its sandbox), never by root: root would
	// follow a link a step left in the workspace into another job.
	rel := filepath.Clean("/" + st.Dir)[1:]
	if rel == "" {
		rel = "."
	}
	wd := filepath.Join(b.Workspace(), rel)
	cmdEnv := st.Env
	if b.i.cfg.Mode != None {
		envFile := filepath.Join(stepsDir, "step-"+n+".env")
		if err := writeOwned(envFile, nulJoin(st.Env), b.su); err != nil {
			return nil, fmt.Errorf("step environment: %w", err)
		}
		cd := rel
		if b.i.cfg.Mode == Bwrap {
			cd = "." // bwrap enters wd inside its sandbox
		}
		argv = append([]string{b.i.bash, "--noprofile", "--norc", "-c", loadEnv, "load-env", envFile, cd}, argv...)
		if b.i.cfg.Mode == Bwrap {
			// The environment is loaded inside the sandbox: bwrap itself,
			// which builds it, must not run with the step's (an
			// LD_PRELOAD of a library the step wrote would run in bwrap,
			// before the sandbox exists, and undo it).
			argv = append(b.bwrapArgs(wd, st.Files), argv...)
		}
		argv = append([]string{"env", "-i"}, argv...)
		// no_new_privs: setuid programs (crontab, at, su) would let a
		// step act as another user or outside the job's cgroup; bwrap,
		// run after it, is not setuid here and needs no privilege.
		argv = append([]string{"setpriv", "--reuid=" + strconv.Itoa(b.su.uid), "--regid=" + strconv.Itoa(b.su.gid),
			"--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"}, argv...)
		cmdEnv = []string{"PATH=" + rootPath, "LANG=C.UTF-8"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if pre := b.prelude(); pre != nil {
		cmd = exec.Command(pre[0], append(pre[1:], argv...)...)
	}
	cmd.Dir = b.Workspace()
	if b.i.cfg.Mode == None {
		cmd.Dir = wd // the runner's own user runs the step: no one to guard against
	}
	cmd.Env = cmdEnv
	// A session of its own: no controlling terminal, so a step cannot
	// push input into the terminal a runner was started from (TIOCSTI)
	// or read it; its process group ID is still its PID.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, nil
}

// Start starts a command Command made: in user and bwrap modes with a
// session keyring of its own (startWithKeyring).
func (b *Box) Start(cmd *exec.Cmd) error {
	if b.i.cfg.Mode == None {
		return cmd.Start()
	}
	return startWithKeyring(cmd)
}

// MaxStepFileBytes bounds what a step may write to each of its files.
const MaxStepFileBytes = 1 << 20

// NewStepFile makes an empty file the slot's user may write (a step's
// $FORGECI_OUTPUT, $FORGECI_ENV or $FORGECI_PATH: kind names it), in the
// steps directory, where the user cannot put a link in its place.
func (b *Box) NewStepFile(kind string) (string, error) {
	file := filepath.Join(b.dir, "steps", kind+"-"+strconv.Itoa(int(b.steps.Add(1))))
	return file, writeOwned(file, nil, b.su)
}

// ReadStepFile reads a step's file (NewStepFile) without following
// links, only if it is still a regular file of the slot's user and at
// most MaxStepFileBytes; name is the variable that named it, for errors.
func (b *Box) ReadStepFile(file, name string) ([]byte, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("$%s is no longer a regular file", name)
	case ok && b.su.uid != 0 && int(st.Uid) != b.su.uid:
		return nil, fmt.Errorf("$%s is not the step's user's file", name)
	case fi.Size() > MaxStepFileBytes:
		return nil, fmt.Errorf("$%s is %d bytes, over %d", name, fi.Size(), MaxStepFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxStepFileBytes+1))
	if err == nil && len(data) > MaxStepFileBytes {
		// It grew after the check: something the step left still writes.
		return nil, fmt.Errorf("$%s is over %d bytes", name, MaxStepFileBytes)
	}
	return data, err
}

// rootPath is the PATH of the stages that run as root.
const rootPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// loadEnv, run by bash as the slot's user with an empty environment (in
// bwrap mode inside the sandbox),
// exports the NUL-separated NAME=value pairs of the file $1, enters the
// step's directory $2 (relative to the workspace, as that user; ./ so that
// a CDPATH the step set cannot take it elsewhere), then runs
// the rest of its arguments.
const loadEnv = `while IFS= read -r -d '' kv; do export "$kv" || exit 125; done < "$1"; cd -- "./$2" || exit 125; shift 2; exec "$@"`

// joinAndMount, run by sh as root, joins every cgroup of the job (the
// arguments up to --) so that nothing the step starts is outside them,
// then, in user and bwrap modes (private mount and IPC namespaces), mounts
// a /proc that shows only the slot user's own processes and gives the job
// /tmp and /var/tmp of its own and the step a fresh /dev/shm and /run/lock,
// and a /dev/mqueue of its IPC namespace: the machine's shows, and makes,
// the machine's queues (hidden by an empty one where the kernel has no
// mqueue; nothing to hide if the machine's went away meanwhile). $1 is the job's tmp, $2 "mount" or "".
const joinAndMount = `t=$1 m=$2; shift 2
while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift
if [ "$m" = mount ]; then
  mount -t proc -o hidepid=2,nosuid,nodev,noexec proc /proc || exit 125
  mount --bind "$t" /tmp || exit 125
  if [ -d /var/tmp ]; then mount --bind /tmp /var/tmp || exit 125; fi
  for d in /dev/shm /run/lock; do
    if [ -d "$d" ] && [ ! -L "$d" ]; then mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$d" || exit 125; fi
  done
  if [ -d /dev/mqueue ] && [ ! -L /dev/mqueue ]; then
    mount -t mqueue -o nosuid,nodev,noexec mqueue /dev/mqueue 2>/dev/null ||
      mount -t tmpfs -o ro,mode=755,nosuid,nodev,noexec tmpfs /dev/mqueue 2>/dev/null ||
      [ ! -e /dev/mqueue ] || { echo "forgeci: /dev/mqueue could not be made the step's own" >&2; exit 125; }
  fi
fi
exec "$@"`

// prelude is what runs as root before the step: nil when there is
// nothing to do (mode none without cgroups).
func (b *Box) prelude() []string {
	mount := b.i.cfg.Mode != None
	if !mount && b.group == nil {
		return nil
	}
	var pre []string
	if mount {
		// Its own System V IPC and POSIX message queues too, gone with it.
		pre = []string{"unshare", "--mount", "--ipc", "--propagation", "private", "--"}
	}
	mode := ""
	if mount {
		mode = "mount"
	}
	pre = append(pre, "sh", "-c", joinAndMount, "sh", b.TmpDir(), mode)
	if b.group != nil {
		pre = append(pre, b.group.ProcsFiles()...)
	}
	return append(pre, "--")
}

func nulJoin(env []string) []byte {
	var out []byte
	for _, kv := range env {
		out = append(append(out, kv...), 0)
	}
	return out
}

// bwrapArgs: a sandbox where only the workspace and the job's tmp (also as
// /tmp) are writable, the system is read-only, and the runner's files (its
// token, its state, other jobs) are not there at all.
func (b *Box) bwrapArgs(wd string, files []string) []string {
	args := []string{b.i.bwrap, "--unshare-all", "--share-net", "--die-with-parent", "--new-session",
		"--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue", "--tmpfs", "/run", "--tmpfs", "/var"}
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt"} {
		if fi, err := os.Lstat(d); err == nil {
			if fi.Mode()&os.ModeSymlink != 0 {
				target, _ := os.Readlink(d)
				args = append(args, "--symlink", target, d)
			} else {
				args = append(args, "--ro-bind", d, d)
			}
		}
	}
	args = append(args, "--bind", b.TmpDir(), "/tmp", "--bind", b.TmpDir(), b.TmpDir(),
		"--bind", b.Workspace(), b.Workspace(),
		"--ro-bind", filepath.Join(b.dir, "steps"), filepath.Join(b.dir, "steps"))
	for _, f := range files {
		// The step's own files, writable over the read-only steps.
		args = append(args, "--bind", f, f)
	}
	for _, p := range b.shared {
		// Read-only binds still let the step connect to a socket.
		args = append(args, "--ro-bind", p, p)
	}
	return append(args, "--chdir", wd, "--")
}

// Kill ends every process of the job.
func (b *Box) Kill() error {
	if b.group == nil {
		return nil
	}
	return b.group.Kill()
}

// LimitHit says which of the job's limits it ran into ("" if none).
func (b *Box) LimitHit() string {
	if b.group == nil {
		return ""
	}
	return b.group.LimitHit()
}

// Close kills what is left of the job and removes its cgroup and its
// directory (workspace, tmp and scripts).
func (b *Box) Close() error {
	err := b.Kill()
	if b.group != nil {
		b.group.Remove()
	}
	if rerr := os.RemoveAll(b.dir); err == nil {
		err = rerr
	}
	return err
}

// writeOwned creates a new file (never following or replacing anything
// there) holding content, readable only by su.
func writeOwned(path string, content []byte, su slotUser) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if su.uid != 0 {
		if err := f.Chown(su.uid, su.gid); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parentsMu orders the making of an attempt's parent directories (the
// run's and the job's) with their removal when another slot ends a job of
// the same run (RemoveParents): they are empty, so removable, until the
// attempt's directory is made in them.
var parentsMu sync.Mutex

// mkdirAttempt makes an attempt's directory and its parents. The parents
// are the runner's: others may pass through them (0711) to their own
// attempt, not list them.
func mkdirAttempt(dir string) error {
	parentsMu.Lock()
	defer parentsMu.Unlock()
	for _, d := range []string{filepath.Dir(filepath.Dir(dir)), filepath.Dir(dir)} {
		if err := mkdirMode(d, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return mkdirMode(dir, 0o711)
}

// RemoveParents removes the job's and the run's directories of attempt
// directory dir, each only if it is empty: the next attempt of the same
// job, or other jobs of the run, may be using them.
func RemoveParents(dir string) {
	parentsMu.Lock()
	defer parentsMu.Unlock()
	_ = os.Remove(filepath.Dir(dir))
	_ = os.Remove(filepath.Dir(filepath.Dir(dir)))
}
