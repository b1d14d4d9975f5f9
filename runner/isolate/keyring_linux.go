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
// which ends with it: no other work runs with those credentials. The new
// keyring is root's, and the step, possessing it, may use it; no other
// step possesses it. Where keyrings cannot be used (no kernel support, a
// container's seccomp profile), steps cannot use them either: cmd starts
// as it is.
func startWithKeyring(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		// An anonymous keyring (a NULL name: a named one might be joined,
		// not made), which x/sys's wrapper cannot ask for.
		_, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
		if errno != 0 && !keyringsUnavailable(errno) {
			errc <- fmt.Errorf("a session keyring for the step: %w", errno)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

func keyringsUnavailable(errno unix.Errno) bool {
	return errors.Is(errno, unix.ENOSYS) || errors.Is(errno, unix.EPERM) || errors.Is(errno, unix.EACCES)
}
