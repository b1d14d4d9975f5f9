// Command keyring, for the isolation tests, puts a key in one of its
// keyrings (add RING NAME VALUE) or reads one found there (read RING
// NAME); RING is session, user or persistent.
package main

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// The process keyring lives in the credentials of the thread that made it
// (Linux made it per-thread), so every keyctl call here must come from one
// thread: the persistent keyring is linked into the process keyring and
// then, to be possessed, found there by the next call. A call from another
// of Go's threads did not possess it (EACCES, now and then).
func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) < 4 {
		fail(2, "usage: keyring add RING NAME VALUE | read RING NAME")
	}
	ring := ringID(os.Args[2])
	switch {
	case len(os.Args) == 5 && os.Args[1] == "add":
		id, err := unix.AddKey("user", os.Args[3], []byte(os.Args[4]), ring)
		if err != nil {
			fail(1, "add: %v", err)
		}
		fmt.Println("added", id)
	case len(os.Args) == 4 && os.Args[1] == "read":
		id, err := unix.KeyctlSearch(ring, "user", os.Args[3], 0)
		if err != nil {
			fail(1, "search: %v", err)
		}
		buf := make([]byte, 256)
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
		if err != nil {
			fail(1, "read: %v", err)
		}
		fmt.Printf("value %s\n", buf[:min(n, len(buf))])
	default:
		fail(2, "usage: keyring add RING NAME VALUE | read RING NAME")
	}
}

func ringID(name string) int {
	switch name {
	case "session":
		return unix.KEY_SPEC_SESSION_KEYRING
	case "user":
		return possess(unix.KEY_SPEC_USER_KEYRING)
	case "persistent":
		id, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, -1, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
		if err != nil {
			fail(1, "persistent keyring: %v", err)
		}
		return possess(id)
	}
	fail(2, "no keyring %q", name)
	return 0
}

// possess links keyring id into the session keyring, as a login session
// links the user's keyring (pam_keyinit), so that its keys are the
// process's to read.
func possess(id int) int {
	if _, err := unix.KeyctlInt(unix.KEYCTL_LINK, id, unix.KEY_SPEC_SESSION_KEYRING, 0, 0); err != nil {
		fail(1, "link keyring %d: %v", id, err)
	}
	return id
}

func fail(code int, format string, args ...any) {
	fmt.Printf(format+"\n", args...)
	os.Exit(code)
}
