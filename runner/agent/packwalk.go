package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/forgeci/forgeci/shared/snapshot"
)

// packLimits bound what one artifact or cache may hold: what an
// extraction takes (snapshot.DefaultLimits), so that nothing is packed
// that could not be restored, and the runner (root, outside the job's
// cgroup, past the job's timeout) neither reads a sparse file's terabytes
// nor holds ten million names. A variable for tests.
var packLimits = snapshot.DefaultLimits

// packWalk gathers the entries under workspace paths for a snapshot,
// without following links, counting against packLimits as it goes, and
// reading directories a slice at a time.
type packWalk struct {
	j       *job
	tree    *snapshot.Tree
	owner   int // the slot user's uid (-1: no check)
	entries int
	bytes   int64
}

// walk adds rel (relative to the workspace) and, for a directory,
// everything under it.
func (w *packWalk) walk(rel string, depth int) error {
	full := filepath.Join(w.j.ws, rel)
	fi, err := os.Lstat(full)
	if err != nil {
		return err
	}
	if err := w.add(rel, fi); err != nil || !fi.IsDir() {
		return err
	}
	if depth > packLimits.MaxDepth {
		return fmt.Errorf("%s is deeper than %d directories", rel, packLimits.MaxDepth)
	}
	d, err := os.OpenFile(full, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		entries, err := d.ReadDir(256)
		for _, e := range entries {
			if err := w.walk(filepath.Join(rel, e.Name()), depth+1); err != nil {
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
func (w *packWalk) add(rel string, fi os.FileInfo) error {
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
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && w.owner >= 0 && int(st.Uid) != w.owner {
		return fmt.Errorf("%s belongs to user %d, not the job's: a hard link to a file outside the job is not packed", rel, st.Uid)
	}
	if fi.IsDir() {
		w.tree.Dirs = append(w.tree.Dirs, filepath.ToSlash(rel))
		return nil
	}
	w.tree.Paths = append(w.tree.Paths, filepath.ToSlash(rel))
	if !fi.Mode().IsRegular() {
		return nil
	}
	// Sizes as the file says, before a byte is read: a sparse file of
	// terabytes costs its walk nothing.
	if fi.Size() > packLimits.MaxFileBytes {
		return fmt.Errorf("%s is %d bytes: an artifact or a cache holds files of at most %d", rel, fi.Size(), packLimits.MaxFileBytes)
	}
	if w.bytes += fi.Size(); w.bytes > packLimits.MaxTotalBytes {
		return fmt.Errorf("more than %d bytes in all: an artifact or a cache holds at most that many", packLimits.MaxTotalBytes)
	}
	return nil
}
