package isolate

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// startWithKeyring starts cmd with a session keyring of its own. A process
// inherits its session keyring from the thread that forks it, so without
// this every step would share the runner's (systemd gives a service one):
// a key one slot's step put there (a Kerberos ticket, a keyctl credential
// store) could be found and read by another slot's step, and by every
// later job. The keyring is joined on a thread locked to this goroutine,
// which ends with it: no other work runs with those credentials (and the
// Go runtime makes no thread from a locked one). The new keyring is
// root's, and the step, possessing it, may use it; no other step
// possesses it. Where keyrings cannot be used (no kernel support, a
// container's seccomp profile), steps cannot use them either: cmd starts
// as it is. The forking thread ends right after: a parent-death signal
// (Pdeathsig) on cmd would fire at once.
func startWithKeyring(cmd *exec.Cmd) error {
	return onThreadOfItsOwn(func() error {
		if err := joinNewSessionKeyring(); err != nil && !keyringsUnavailable(err) {
			return fmt.Errorf("a session keyring for the step: %w", err)
		}
		return cmd.Start()
	})
}

// onThreadOfItsOwn runs fn on a thread locked to a goroutine and never
// unlocked, so the thread, with whatever fn changed of it, exits with the
// goroutine.
func onThreadOfItsOwn(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- fn()
	}()
	return <-errc
}

// joinNewSessionKeyring joins the calling thread to a new anonymous
// session keyring (a NULL name: a named one might be joined, not made),
// which x/sys's wrapper cannot ask for.
func joinNewSessionKeyring() error {
	if _, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

func keyringsUnavailable(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// keyringsWork says whether this machine lets the runner use keyrings.
func keyringsWork() error { return onThreadOfItsOwn(joinNewSessionKeyring) }
