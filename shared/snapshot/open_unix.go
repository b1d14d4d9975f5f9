//go:build unix

package snapshot

import (
	"io"
	"io/fs"
	"syscall"
)

// openForRead opens a regular file for reading by its descriptor alone.
// os.Open would also make the descriptor non-blocking and offer it to the
// network poller, two more system calls per file that a regular file never
// needs; on a virtual machine they were a tenth of a snapshot's time.
// O_NOFOLLOW: a path listed as a file that has since become a symlink is
// refused rather than followed out of the tree.
func openForRead(name string) (io.ReadCloser, error) {
	for {
		fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return rawFile(fd), nil
	}
}

type rawFile int

func (f rawFile) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f rawFile) Close() error { return syscall.Close(int(f)) }

func (f rawFile) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := syscall.Write(int(f), p[written:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return written, err
		}
		if n == 0 {
			return written, io.ErrShortWrite
		}
		written += n
	}
	return written, nil
}

func (f rawFile) Chmod(mode fs.FileMode) error {
	for {
		err := syscall.Fchmod(int(f), uint32(mode.Perm()))
		if err != syscall.EINTR {
			return err
		}
	}
}
