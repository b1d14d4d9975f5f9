package isolate

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Share makes path, a file the runner made for the job outside the
// job's directories (its identity-token socket), reachable by the job's
// steps at the same path. Only bwrap hides the machine's files: it binds
// path read-only into the sandbox (a socket stays connectable); in the
// other modes the steps see it already, and its owner and mode say who
// may use it. Call it before the steps start.
func (b *Box) Share(path string) { b.shared = append(b.shared, path) }

// Executable returns a path where the job's steps can run the running
// program (the runner). In user and bwrap modes the runner's own file may
// be out of the steps' sight (under /tmp, which is the job's own there;
// outside the system directories bwrap shows; behind a directory only
// root may enter), so it is copied into the steps directory, which is the
// runner's, read-only to the steps and removed with the job. In mode none
// the steps run as the runner's own user and see its file.
func (b *Box) Executable() (string, error) {
	if b.i.cfg.Mode == None {
		return os.Executable()
	}
	// The program running, even if its file was replaced since it started.
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst := filepath.Join(b.dir, "steps", "forgeci-runner")
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	// Exactly 0755 whatever the umask: the slot's user runs it.
	return dst, os.Chmod(dst, 0o755)
}
