//go:build linux

package snapshot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// beneath reads a tree's entries by their path under its root's
// descriptor with no symbolic link followed on the way (openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or one element at a time where the
// kernel has no openat2), and checks what it opened against what the
// entry says: a directory swapped for a link to elsewhere, or a file
// swapped for another, while the tree is read fails the snapshot instead
// of putting another's bytes in it (Tree.Beneath).
type beneath struct {
	root  int
	owner int
}

func openBeneathRoot(root string, owner int) (*beneath, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return &beneath{root: fd, owner: owner}, nil
}

func (b *beneath) Close() error { return unix.Close(b.root) }

// openAt opens rel (slash-separated, local) with flags.
func (b *beneath) openAt(rel string, flags int) (int, error) {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NONBLOCK // a FIFO put in a file's place must not block the open
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for range 100 {
		fd, err := unix.Openat2(b.root, rel, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN): // EAGAIN: a rename raced the lookup
			continue
		case errors.Is(err, unix.ENOSYS):
			return b.openByElements(rel, flags)
		}
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	return -1, &fs.PathError{Op: "open", Path: rel, Err: unix.EAGAIN}
}

// openByElements opens rel a directory at a time, each with O_NOFOLLOW.
func (b *beneath) openByElements(rel string, flags int) (int, error) {
	elems := strings.Split(rel, "/")
	dir, err := unix.Dup(b.root)
	if err != nil {
		return -1, err
	}
	for _, e := range elems[:len(elems)-1] {
		next, err := unix.Openat(dir, e, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		dir = next
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, elems[len(elems)-1], flags, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	return fd, nil
}

// openFile opens entry e's file and checks that it is still a regular
// file of e's size and mode, and the owner's.
func (b *beneath) openFile(e Entry) (io.ReadCloser, error) {
	fd, err := b.openAt(e.Path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mode := fs.FileMode(st.Mode & 0o777)
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.Size || NormalFileMode(mode) != e.Mode:
		err = fmt.Errorf("%s changed while the snapshot was made", e.Path)
	case b.owner >= 0 && int(st.Uid) != b.owner:
		err = fmt.Errorf("%s belongs to user %d, not the job's: it is not packed", e.Path, st.Uid)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return rawFile(fd), nil
}

// readlink reads the target of the symlink at rel.
func (b *beneath) readlink(rel string) (string, error) {
	fd, err := b.openAt(rel, unix.O_PATH)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	buf := make([]byte, MaxPathLen+1)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: rel, Err: err}
	}
	return string(buf[:n]), nil
}

// lstat is rel's metadata, read from a descriptor opened beneath the root
// (O_PATH: the entry itself, a symlink not followed).
func (b *beneath) lstat(rel string) (fs.FileInfo, error) {
	fd, err := b.openAt(rel, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	fi := &statInfo{name: path.Base(rel)}
	if err := unix.Fstat(fd, &fi.st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: rel, Err: err}
	}
	return fi, nil
}

// statInfo is an fs.FileInfo from a stat.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	return m
}
