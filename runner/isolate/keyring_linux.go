package isolate

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// lockSessionKeyring gives the runner a session keyring of its own that
// no one may use, not even its possessors. Every step inherits the
// runner's session keyring (setpriv and bwrap keep it), so without this a
// key one slot's step put there (a Kerberos ticket, a keyctl credential
// store) could be found and read by another slot's step, and by every
// later job. A step that needs a session keyring makes its own (keyctl
// session), which is its processes' alone.
func lockSessionKeyring() error {
	// An anonymous keyring (a NULL name: a named one might be joined, not
	// made), which x/sys's wrapper cannot ask for.
	id, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	if errno != 0 {
		return fmt.Errorf("join a new session keyring: %w", errno)
	}
	if err := unix.KeyctlSetperm(int(id), 0); err != nil {
		return fmt.Errorf("lock the session keyring: %w", err)
	}
	return nil
}
