package snapshot

import (
	"archive/tar"
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

	"github.com/klauspost/compress/zstd"
)

// Limits bound what an extraction may write. Zero fields take the defaults.
type Limits struct {
	MaxFiles      int     // entries of any type
	MaxTotalBytes int64   // sum of file sizes
	MaxFileBytes  int64   // one file
	MaxPathLen    int     // bytes in one path
	MaxDepth      int     // path elements
	MaxRatio      float64 // decompressed bytes per compressed byte
}

// DefaultLimits are generous for source trees and tight for bombs.
var DefaultLimits = Limits{
	MaxFiles:      200_000,
	MaxTotalBytes: 4 << 30,
	MaxFileBytes:  1 << 30,
	MaxPathLen:    MaxPathLen,
	MaxDepth:      64,
	MaxRatio:      250,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxFiles > 0 {
		d.MaxFiles = l.MaxFiles
	}
	if l.MaxTotalBytes > 0 {
		d.MaxTotalBytes = l.MaxTotalBytes
	}
	if l.MaxFileBytes > 0 {
		d.MaxFileBytes = l.MaxFileBytes
	}
	if l.MaxPathLen > 0 {
		d.MaxPathLen = l.MaxPathLen
	}
	if l.MaxDepth > 0 {
		d.MaxDepth = l.MaxDepth
	}
	if l.MaxRatio > 0 {
		d.MaxRatio = l.MaxRatio
	}
	return d
}

// ErrRefused wraps every reason an archive is refused.
var ErrRefused = errors.New("snapshot refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// ratioSlack is how many decompressed bytes are allowed before the ratio
// limit applies: tiny archives of small files have high ratios honestly.
const ratioSlack = 8 << 20

// sink receives the entries of an archive that passed every check.
type sink interface {
	dir(name string) error
	file(name string, mode fs.FileMode, r io.Reader, size int64) error
	symlink(name, target string) error
}

// Extract decompresses and unpacks a snapshot blob into dest, which must be
// an empty directory, under bounded rules: only regular files, directories
// and relative in-tree symlinks; no absolute paths, "..", duplicates, writes
// through symlinks, hard links, devices, FIFOs or setuid/setgid/sticky bits;
// file count, sizes, path length, depth and compression ratio limited.
// All writes go through an os.Root, so nothing can land outside dest even if
// a check here were wrong. It returns the manifest of what was written,
// recomputed from disk. On error dest may hold a partial tree; the caller
// removes it.
func Extract(blob io.Reader, dest string, lim Limits) (Manifest, error) {
	root, err := os.OpenRoot(dest)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	if names, err := readDirNames(root); err != nil || len(names) > 0 {
		return nil, fmt.Errorf("workspace %s must be an empty directory", dest)
	}
	out, err := newRootSink(root)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	err = unpack(blob, lim, out)
	out.close()
	if err != nil {
		return nil, err
	}
	return ManifestOf(root)
}

// Inspect checks a snapshot blob under the same rules as Extract without
// writing anything, and returns its manifest plus the contents of the
// regular files named in want (each at most maxWant bytes). The control
// plane uses it to verify an upload and read the pipeline file.
func Inspect(blob io.Reader, lim Limits, want []string, maxWant int64) (Manifest, map[string][]byte, error) {
	h := &hashSink{want: map[string]bool{}, got: map[string][]byte{}, maxWant: maxWant}
	for _, w := range want {
		h.want[w] = true
	}
	if err := unpack(blob, lim, h); err != nil {
		return nil, nil, err
	}
	h.m.Sort()
	return h.m, h.got, nil
}

// unpack is every rule of extraction, once: it reads the archive and hands
// only entries that passed all checks to the sink.
func unpack(blob io.Reader, lim Limits, out sink) error {
	lim = lim.withDefaults()
	compressed := &countingReader{r: blob}
	// Concurrency 2: blocks decode in a goroutine while this one unpacks.
	dec, err := zstd.NewReader(compressed, zstd.WithDecoderConcurrency(2),
		zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderMaxWindow(32<<20))
	if err != nil {
		return err
	}
	defer dec.Close()
	decompressed := &countingReader{r: dec, ratioOf: compressed, maxRatio: lim.MaxRatio}
	if err := unpackTar(tar.NewReader(decompressed), lim, out, nil); err != nil {
		return err
	}
	// Drain the zstd stream so that trailing garbage or a bad checksum is
	// caught, not ignored.
	if _, err := io.Copy(io.Discard, decompressed); err != nil {
		if errors.Is(err, ErrRefused) {
			return err
		}
		return refuse("archive is corrupt after its last entry: %v", err)
	}
	return nil
}

// unpackTar applies the entry rules to a tar stream. rename, when set, maps
// each header's name first (skip drops the entry).
func unpackTar(tr *tar.Reader, lim Limits, out sink, rename func(*tar.Header) (name string, skip bool, err error)) error {
	seen := map[string]string{} // path -> type
	var files int
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, ErrRefused) {
				return err
			}
			return refuse("archive is corrupt: %v", err)
		}
		files++
		if files > lim.MaxFiles {
			return refuse("more than %d entries", lim.MaxFiles)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if rename != nil {
			var skip bool
			if name, skip, err = rename(hdr); err != nil {
				return err
			} else if skip {
				continue
			}
		}
		if hdr.Typeflag == tar.TypeDir && name == "" {
			return refuse("entry %q names the root", hdr.Name)
		}
		if err := CheckPath(name, lim.MaxPathLen); err != nil {
			return refuse("%v", err)
		}
		if depth := strings.Count(name, "/") + 1; depth > lim.MaxDepth {
			return refuse("path %.80q is %d levels deep, over the limit of %d", name, depth, lim.MaxDepth)
		}
		if _, dup := seen[name]; dup {
			return refuse("duplicate entry %q", name)
		}
		// No entry may pass through a symlink this archive made, even one
		// pointing inside the tree: the manifest would no longer describe
		// what the job sees.
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			switch seen[p] {
			case TypeSymlink:
				return refuse("entry %q is written through the symlink %q", name, p)
			case TypeFile:
				return refuse("entry %q is inside the file %q", name, p)
			}
		}
		if hdr.Mode&0o7000 != 0 {
			return refuse("entry %q has setuid, setgid or sticky bits (mode %o)", name, hdr.Mode)
		}
		switch hdr.Typeflag {
		case tar.TypeDir, tar.TypeReg, tar.TypeSymlink:
		case tar.TypeLink:
			return refuse("entry %q is a hard link", name)
		case tar.TypeChar, tar.TypeBlock:
			return refuse("entry %q is a device", name)
		case tar.TypeFifo:
			return refuse("entry %q is a FIFO", name)
		default:
			return refuse("entry %q has unsupported type %q", name, hdr.Typeflag)
		}
		if err := makeParents(out, name, seen); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := out.dir(name); err != nil {
				return err
			}
			seen[name] = TypeDir
		case tar.TypeReg:
			if hdr.Size < 0 || hdr.Size > lim.MaxFileBytes {
				return refuse("file %q is %d bytes, over the limit of %d", name, hdr.Size, lim.MaxFileBytes)
			}
			total += hdr.Size
			if total > lim.MaxTotalBytes {
				return refuse("files total more than %d bytes", lim.MaxTotalBytes)
			}
			if err := out.file(name, NormalFileMode(fs.FileMode(hdr.Mode)), tr, hdr.Size); err != nil {
				return err
			}
			seen[name] = TypeFile
		case tar.TypeSymlink:
			if err := CheckSymlink(name, hdr.Linkname); err != nil {
				return refuse("%v", err)
			}
			if err := out.symlink(name, hdr.Linkname); err != nil {
				return err
			}
			seen[name] = TypeSymlink
		}
	}
	return nil
}

// makeParents creates the parents of name that the archive did not list.
func makeParents(out sink, name string, seen map[string]string) error {
	var missing []string
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		if seen[p] == TypeDir {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := out.dir(missing[i]); err != nil {
			return err
		}
		seen[missing[i]] = TypeDir
	}
	return nil
}

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
	n, err := io.CopyBuffer(f, io.LimitReader(src, size), s.buf)
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return err
		}
		return refuse("file %q: %v", name, err)
	}
	if n != size {
		return refuse("file %q is truncated (%d of %d bytes)", name, n, size)
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
	n, err := io.Copy(w, io.LimitReader(r, size))
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return err
		}
		return refuse("file %q: %v", name, err)
	}
	if n != size {
		return refuse("file %q is truncated (%d of %d bytes)", name, n, size)
	}
	if keep != nil {
		s.got[name] = keep.Bytes()
	}
	s.m = append(s.m, Entry{Path: name, Type: TypeFile, Mode: mode, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
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

// countingReader counts bytes; with ratioOf set it refuses to go on once
// it has produced more than maxRatio times what ratioOf consumed. The
// count is atomic: the zstd decoder reads its input from its own goroutine.
type countingReader struct {
	r        io.Reader
	n        atomic.Int64
	ratioOf  *countingReader
	maxRatio float64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	total := c.n.Add(int64(n))
	if c.ratioOf != nil && total > ratioSlack {
		if in := c.ratioOf.n.Load(); float64(total) > c.maxRatio*float64(in) {
			return n, refuse("compression ratio over %.0f:1 (%d bytes from %d): a decompression bomb", c.maxRatio, total, in)
		}
	}
	return n, err
}
