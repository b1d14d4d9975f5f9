package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/forgeci/forgeci/shared/snapshot"
)

// packLimits bound what one artifact or cache may hold: what an
// extraction takes (snapshot.DefaultLimits), so that nothing is packed
// that could not be restored, and the runner (root, outside the job's
// cgroup, past the job's timeout) neither reads a sparse file's terabytes
// nor holds ten million names. A variable for tests.
var packLimits = snapshot.DefaultLimits

// packWalk gathers the entries under workspace paths for a snapshot,
// counting against packLimits as it goes, and reading directories a
// slice at a time. It goes from directory descriptor to directory
// descriptor, one name at a time, never through a symbolic link: the
// job's processes are killed by then, but another slot's (another user,
// whom the job's steps may have let into the workspace) are not, and a
// directory swapped for a link to the runner's state while the runner
// reads must not be followed. snapshot.Write reads the files the same
// way (Tree.Beneath).
type packWalk struct {
	j       *job
	tree    *snapshot.Tree
	owner   int // the slot user's uid (-1: no check)
	entries int
	bytes   int64
}

// path adds workspace path p and everything under it; an element of p
// that is a symbolic link is refused (the last may be one: it is kept as
// one).
func (w *packWalk) path(p string) error {
	dir, err := unix.Open(w.j.ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: w.j.ws, Err: err}
	}
	elems := strings.Split(filepath.ToSlash(p), "/")
	for i, e := range elems[:len(elems)-1] {
		next, err := unix.Openat(dir, e, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("%s is not a directory (a symlink?): paths are not followed through links", strings.Join(elems[:i+1], "/"))
		}
		if err != nil {
			return &fs.PathError{Op: "open", Path: strings.Join(elems[:i+1], "/"), Err: err}
		}
		dir = next
	}
	defer unix.Close(dir)
	return w.walk(dir, p, elems[len(elems)-1], 0)
}

// walk adds rel, name in directory dir, and, for a directory, everything
// under it.
func (w *packWalk) walk(dir int, rel, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: rel, Err: err}
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if err := w.add(rel, &st); err != nil || !isDir {
		return err
	}
	if depth > packLimits.MaxDepth {
		return fmt.Errorf("%s is deeper than %d directories", rel, packLimits.MaxDepth)
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	d := os.NewFile(uintptr(fd), rel)
	defer d.Close()
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			if err := w.walk(fd, filepath.Join(rel, n), n, depth+1); err != nil {
				return err
			}
		}
		if err != nil {
			return nil // io.EOF
		}
	}
}

// add notes one entry, refusing what is not the job's and what passes
// the bounds.
func (w *packWalk) add(rel string, st *unix.Stat_t) error {
	if w.j.ctx != nil && w.j.ctx.Err() != nil {
		return w.j.ctx.Err()
	}
	if w.entries++; w.entries > packLimits.MaxFiles {
		return fmt.Errorf("more than %d entries: an artifact or a cache holds at most that many", packLimits.MaxFiles)
	}
	// Everything in the workspace is the slot user's (the runner handed
	// it over; the steps made the rest): anything else is a hard link to
	// another's file, which the runner (root) must not read into an
	// artifact or a cache.
	if w.owner >= 0 && int(st.Uid) != w.owner {
		return fmt.Errorf("%s belongs to user %d, not the job's: a hard link to a file outside the job is not packed", rel, st.Uid)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		w.tree.Dirs = append(w.tree.Dirs, filepath.ToSlash(rel))
		return nil
	}
	w.tree.Paths = append(w.tree.Paths, filepath.ToSlash(rel))
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	// Sizes as the file says, before a byte is read: a sparse file of
	// terabytes costs its walk nothing.
	if st.Size > packLimits.MaxFileBytes {
		return fmt.Errorf("%s is %d bytes: an artifact or a cache holds files of at most %d", rel, st.Size, packLimits.MaxFileBytes)
	}
	if w.bytes += st.Size; w.bytes > packLimits.MaxTotalBytes {
		return fmt.Errorf("more than %d bytes in all: an artifact or a cache holds at most that many", packLimits.MaxTotalBytes)
	}
	return nil
}
