package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"golang.org/x/sys/unix"
)

// Bounds of one hashFiles(): the files it reads, the entries it walks.
const (
	maxHashFiles   = 100000
	maxHashEntries = 1000000
	// maxHashDepth bounds the descriptors the walk holds (one a level)
	// far above any real tree (node_modules of npm 2 nest some dozens).
	maxHashDepth = 256
)

// hashFiles is GitHub's hashFiles(patterns): the SHA-256 of the SHA-256s
// of the workspace's regular files that match a pattern (and no later
// !pattern), in path order; "" when none match. The runner reads the
// files, the workspace is the job's: every directory and file is opened
// beneath the one holding it with no symbolic link followed (openat2
// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS, from directory descriptors), so
// a step that swaps a directory for a link while this walks gets neither
// the names nor the contents of what the link leads to; and a hard link
// to a file the job's user (owner; -1: no slot user) does not own is
// refused, should the kernel allow one (fs.protected_hardlinks=0).
func hashFiles(ctx context.Context, ws string, owner int, patterns []string) (string, error) {
	for _, p := range patterns {
		if !doublestar.ValidatePattern(strings.TrimPrefix(p, "!")) {
			return "", fmt.Errorf("%q is not a valid pattern", p)
		}
	}
	root, err := os.Open(ws)
	if err != nil {
		return "", fmt.Errorf("hashFiles: %w", err)
	}
	defer root.Close()
	w := &hashWalk{ctx: ctx, patterns: patterns}
	if err := w.dir(root, ""); err != nil {
		return "", fmt.Errorf("hashFiles: %w", err)
	}
	if len(w.matched) == 0 {
		return "", nil
	}
	sort.Strings(w.matched)
	all := sha256.New()
	for _, rel := range w.matched {
		sum, err := hashBeneath(ctx, root, rel, owner)
		if err != nil {
			return "", fmt.Errorf("hashFiles: %s: %w", rel, err)
		}
		all.Write(sum)
	}
	return hex.EncodeToString(all.Sum(nil)), nil
}

// hashWalk collects the regular files that match, walking directory
// descriptors.
type hashWalk struct {
	ctx      context.Context
	patterns []string
	entries  int
	matched  []string
}

// dir walks the open directory d, at rel in the workspace.
func (w *hashWalk) dir(d *os.File, rel string) error {
	for {
		ents, err := d.ReadDir(1024)
		for _, e := range ents {
			if err := w.entry(d, rel, e); err != nil {
				return err
			}
		}
		if err == io.EOF || len(ents) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (w *hashWalk) entry(d *os.File, rel string, e fs.DirEntry) error {
	if w.entries++; w.entries > maxHashEntries {
		return fmt.Errorf("the workspace holds more than %d entries", maxHashEntries)
	}
	if w.ctx.Err() != nil {
		return context.Cause(w.ctx)
	}
	path := e.Name()
	if rel != "" {
		path = rel + "/" + e.Name()
	}
	switch {
	case e.Type().IsRegular():
		if matches(w.patterns, path) {
			if len(w.matched) == maxHashFiles {
				return fmt.Errorf("more than %d files match", maxHashFiles)
			}
			w.matched = append(w.matched, path)
		}
	case e.IsDir():
		// One descriptor is held per level: a step's deep nesting must
		// not exhaust the runner's (reportWalk bounds it the same way).
		if depth := strings.Count(path, "/") + 1; depth > maxHashDepth {
			return fmt.Errorf("directories nest deeper than %d levels at %s", maxHashDepth, path)
		}
		fd, err := unix.Openat2(int(d.Fd()), e.Name(), &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return nil // no longer a directory here: passed over
		}
		sub := os.NewFile(uintptr(fd), path)
		defer sub.Close()
		return w.dir(sub, path)
	}
	return nil
}

// matches: the last pattern that decides rel wins, a ! one excluding.
func matches(patterns []string, rel string) bool {
	in := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		if ok, _ := doublestar.Match(strings.TrimPrefix(p, "!"), rel); ok {
			in = !neg
		}
	}
	return in
}

// hashBeneath hashes rel, opened beneath root without following links;
// it must still be a regular file when opened, and not another user's
// file linked in.
func hashBeneath(ctx context.Context, root *os.File, rel string, owner int) ([]byte, error) {
	fd, err := unix.Openat2(int(root.Fd()), rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	if owner >= 0 && st.Nlink > 1 && int(st.Uid) != owner {
		return nil, errors.New("a hard link to a file the job does not own")
	}
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// ctxReader stops a long read when the job stops.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}
