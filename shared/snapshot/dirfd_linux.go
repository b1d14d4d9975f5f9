//go:build linux

package snapshot

import (
	"io"
	"io/fs"
	"os"
	"syscall"
)

// On Linux, extraction creates and reads back workspace files with openat(2)
// on a descriptor of their directory, one name at a time, and keeps the
// descriptors away from os.File: os.Root.OpenFile would also make each one
// non-blocking and offer it to the network poller (four more system calls
// per file that a regular file never needs), which was a fifth of an
// extraction's time. The safety is the same as the os.Root it stands
// beside: the directory descriptor was opened inside the workspace's root,
// the name is one element with no "/" or "..", and O_NOFOLLOW|O_EXCL (or
// O_NOFOLLOW for reading) refuse a symlink in its place.

// dirFD opens r's directory for openat and listing; closing it releases
// the descriptor.
func dirFD(r *os.Root) (*os.File, int, error) {
	f, err := r.Open(".")
	if err != nil {
		return nil, -1, err
	}
	return f, int(f.Fd()), nil
}

func createAt(dirfd int, name string) (writeFile, error) {
	fd, err := openat(dirfd, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return rawFile(fd), nil
}

// openReadAt opens name for reading and returns its mode from the open
// descriptor, so the mode describes what is read.
func openReadAt(dirfd int, name string) (io.ReadCloser, fs.FileMode, error) {
	fd, err := openat(dirfd, name, syscall.O_RDONLY, 0)
	if err != nil {
		return nil, 0, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, 0, &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		mode |= fs.ModeIrregular
	}
	return rawFile(fd), mode, nil
}

func openat(dirfd int, name string, flags int, perm uint32) (int, error) {
	for {
		fd, err := syscall.Openat(dirfd, name, flags|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "openat", Path: name, Err: err}
		}
		return fd, nil
	}
}
