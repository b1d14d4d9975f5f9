package isolate

import "syscall"

// closeInheritedFDs marks every descriptor above stderr close-on-exec, so
// that none the runner inherited (from a wrapper, a shell, flock) reaches
// a step: exec passes on every descriptor not so marked. The runner's own
// are opened close-on-exec by Go already.
func closeInheritedFDs() error {
	const sysCloseRange, closeRangeCloexec = 436, 4 // the same on every Linux architecture
	if _, _, errno := syscall.RawSyscall(sysCloseRange, 3, ^uintptr(0), closeRangeCloexec); errno != 0 {
		return errno
	}
	return nil
}
