package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Where extraction's entries go: the workspace (rootSink), or only their
// hashes (hashSink); and the manifest of a tree on disk.

// rootSink writes through os.Roots: the workspace's, and one for each
// directory on the way to the last entry written, kept as a stack. A write
// is then one openat of a single name in its own directory rather than a
// walk from the top, component by component, for every entry (that walk was
// most of the extraction's time). Each root is opened inside its parent's,
// so nothing can land outside the workspace any more than with one root.
type rootSink struct {
	buf   []byte
	stack []openDir // stack[0] is the workspace; the caller closes its root
}

// openDir is one open directory of the workspace: its root, and on Linux
// a descriptor for creating and reading its files (dirfd_linux.go).
type openDir struct {
	path string // "" for the workspace
	root *os.Root
	dir  *os.File // the directory itself, open on Linux; nil elsewhere
	fd   int      // dir's descriptor; -1: files go through root
}

// useDirFDs lets tests take the portable path on Linux too.
var useDirFDs = true

func newOpenDir(p string, r *os.Root) (openDir, error) {
	d := openDir{path: p, root: r, fd: -1}
	if useDirFDs {
		dir, fd, err := dirFD(r)
		if err != nil {
			return d, err
		}
		d.dir, d.fd = dir, fd
	}
	return d, nil
}

// close closes the descriptor and, unless it is the caller's, the root.
func (d openDir) close(ownRoot bool) {
	if d.dir != nil {
		d.dir.Close()
	}
	if ownRoot {
		d.root.Close()
	}
}

// writeFile is a file being extracted: an *os.File or a bare descriptor.
type writeFile interface {
	io.WriteCloser
	Chmod(fs.FileMode) error
}

// create makes the new file base in d; O_EXCL: never open something that
// is already there (a symlink, say).
func (d openDir) create(base string) (writeFile, error) {
	if d.fd >= 0 {
		return createAt(d.fd, base)
	}
	return d.root.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

// open opens base in d for reading and returns the mode of what it opened.
func (d openDir) open(base string) (io.ReadCloser, fs.FileMode, error) {
	if d.fd >= 0 {
		return openReadAt(d.fd, base)
	}
	f, err := d.root.Open(base)
	if err != nil {
		return nil, 0, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Mode(), nil
}

func newRootSink(root *os.Root) (*rootSink, error) {
	top, err := newOpenDir("", root)
	if err != nil {
		return nil, err
	}
	return &rootSink{buf: make([]byte, 256<<10), stack: []openDir{top}}, nil
}

// in returns name's directory and name's last element.
func (s *rootSink) in(name string) (openDir, string, error) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	for len(s.stack) > 1 {
		top := s.stack[len(s.stack)-1]
		if dir == top.path || strings.HasPrefix(dir, top.path+"/") {
			break
		}
		top.close(true)
		s.stack = s.stack[:len(s.stack)-1]
	}
	top := s.stack[len(s.stack)-1]
	rest := strings.TrimPrefix(dir[len(top.path):], "/")
	for rest != "" {
		elem, more, _ := strings.Cut(rest, "/")
		p := path.Join(top.path, elem)
		r, err := top.root.OpenRoot(elem)
		if err != nil {
			return openDir{}, "", refuse("directory %q: %v", p, err)
		}
		if top, err = newOpenDir(p, r); err != nil {
			r.Close()
			return openDir{}, "", refuse("directory %q: %v", p, err)
		}
		s.stack = append(s.stack, top)
		rest = more
	}
	return top, base, nil
}

// close closes every directory the sink opened; the workspace's root
// stays open for its owner.
func (s *rootSink) close() {
	for i, d := range s.stack {
		d.close(i > 0)
	}
	s.stack = nil
}

func (s *rootSink) dir(name string) error {
	d, base, err := s.in(name)
	if err != nil {
		return err
	}
	if err := d.root.Mkdir(base, 0o755); err != nil {
		return refuse("directory %q: %v", name, err)
	}
	return nil
}

func (s *rootSink) symlink(name, target string) error {
	d, base, err := s.in(name)
	if err != nil {
		return err
	}
	if err := d.root.Symlink(target, base); err != nil {
		return refuse("symlink %q: %v", name, err)
	}
	return nil
}

func (s *rootSink) file(name string, mode fs.FileMode, src io.Reader, size int64) error {
	d, base, err := s.in(name)
	if err != nil {
		return err
	}
	f, err := d.create(base)
	if err != nil {
		return refuse("file %q: %v", name, err)
	}
	// Closed exactly once, on every path, panics included: a bare
	// descriptor closed twice could close another goroutine's file that
	// reused the number.
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	if err := copyEntry(f, src, name, size, s.buf); err != nil {
		return err
	}
	// The mode is set after the write, not at create: the umask would
	// otherwise decide it.
	err = f.Chmod(mode)
	cerr := f.Close()
	f = nil
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("file %q: %w", name, err)
	}
	return nil
}

type hashSink struct {
	m       Manifest
	want    map[string]bool
	got     map[string][]byte
	maxWant int64
}

func (s *hashSink) dir(name string) error {
	s.m = append(s.m, Entry{Path: name, Type: TypeDir, Mode: 0o755})
	return nil
}

func (s *hashSink) symlink(name, target string) error {
	s.m = append(s.m, Entry{Path: name, Type: TypeSymlink, Mode: 0o777, Size: int64(len(target)), SHA256: hashString(target), Target: target})
	return nil
}

func (s *hashSink) file(name string, mode fs.FileMode, r io.Reader, size int64) error {
	h := sha256.New()
	var w io.Writer = h
	var keep *bytes.Buffer
	if s.want[name] && size <= s.maxWant {
		keep = &bytes.Buffer{}
		w = io.MultiWriter(h, keep)
	}
	if err := copyEntry(w, r, name, size, nil); err != nil {
		return err
	}
	if keep != nil {
		s.got[name] = keep.Bytes()
	}
	s.m = append(s.m, Entry{Path: name, Type: TypeFile, Mode: mode, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))})
	return nil
}

// copyEntry copies a file entry's size bytes from src to w, through buf
// when it is not nil. A failed read or write is a refusal, kept as it is
// when the read itself refused (the ratio limit); so is a short entry.
func copyEntry(w io.Writer, src io.Reader, name string, size int64, buf []byte) error {
	n, err := io.CopyBuffer(w, io.LimitReader(src, size), buf)
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return err
		}
		return refuse("file %q: %v", name, err)
	}
	if n != size {
		return refuse("file %q is truncated (%d of %d bytes)", name, n, size)
	}
	return nil
}

// ManifestOf computes the manifest of the tree under root from disk. It
// walks directory by directory, each opened as a root inside its parent,
// so that every entry is looked up by its own name in its own directory.
func ManifestOf(root *os.Root) (Manifest, error) {
	// Reading back and hashing is most of a manifest's time and the files
	// of a directory are independent, so they are hashed on up to four
	// goroutines, one buffer each.
	w := manifestWalk{}
	for range min(runtime.GOMAXPROCS(0), 4) {
		w.bufs = append(w.bufs, make([]byte, 256<<10))
	}
	top, err := newOpenDir("", root)
	if err != nil {
		return nil, fmt.Errorf("manifest of workspace: %w", err)
	}
	err = w.dir(top)
	top.close(false)
	if err != nil {
		return nil, fmt.Errorf("manifest of workspace: %w", err)
	}
	w.m.Sort()
	return w.m, nil
}

type manifestWalk struct {
	m    Manifest
	bufs [][]byte
}

func (w *manifestWalk) dir(d openDir) error {
	f := d.dir // listed once, right after it was opened
	if f == nil {
		var err error
		if f, err = d.root.Open("."); err != nil {
			return err
		}
		defer f.Close()
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	var files []string
	for _, de := range entries {
		name := de.Name()
		p := path.Join(d.path, name)
		switch t := de.Type(); {
		case t.IsDir():
			w.m = append(w.m, Entry{Path: p, Type: TypeDir, Mode: 0o755})
			r, err := d.root.OpenRoot(name)
			if err != nil {
				return err
			}
			sub, err := newOpenDir(p, r)
			if err == nil {
				err = w.dir(sub)
			}
			sub.close(true)
			if err != nil {
				return err
			}
		case t&fs.ModeSymlink != 0:
			target, err := d.root.Readlink(name)
			if err != nil {
				return err
			}
			w.m = append(w.m, Entry{Path: p, Type: TypeSymlink, Mode: 0o777, Size: int64(len(target)), SHA256: hashString(target), Target: target})
		case t.IsRegular():
			files = append(files, name)
		default:
			return fmt.Errorf("%s is a %s", p, t)
		}
	}
	return w.hashFiles(d, files)
}

// hashFiles adds the entries of the regular files names in d, hashed on up
// to len(w.bufs) goroutines; d stays open until all are done.
func (w *manifestWalk) hashFiles(d openDir, names []string) error {
	out := make([]Entry, len(names))
	errs := make([]error, len(names))
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, buf := range w.bufs[:min(len(w.bufs), len(names))] {
		wg.Go(func() {
			for k := int(next.Add(1)) - 1; k < len(names); k = int(next.Add(1)) - 1 {
				out[k], errs[k] = hashFile(d, names[k], buf)
			}
		})
	}
	wg.Wait()
	for k, e := range out {
		if errs[k] != nil {
			return errs[k]
		}
		e.Path = path.Join(d.path, names[k])
		w.m = append(w.m, e)
	}
	return nil
}

func hashFile(d openDir, name string, buf []byte) (Entry, error) {
	// The mode comes from the open file, not the directory listing: it is
	// what was read that the entry must describe.
	f, mode, err := d.open(name)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	if !mode.IsRegular() {
		return Entry{}, fmt.Errorf("%s is a %s", name, mode.Type())
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Type: TypeFile, Mode: NormalFileMode(mode), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func readDirNames(root *os.Root) ([]string, error) {
	f, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}
