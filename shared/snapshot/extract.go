package snapshot

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
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
	return Limits{
		MaxFiles:      orDefault(l.MaxFiles, d.MaxFiles),
		MaxTotalBytes: orDefault(l.MaxTotalBytes, d.MaxTotalBytes),
		MaxFileBytes:  orDefault(l.MaxFileBytes, d.MaxFileBytes),
		MaxPathLen:    orDefault(l.MaxPathLen, d.MaxPathLen),
		MaxDepth:      orDefault(l.MaxDepth, d.MaxDepth),
		MaxRatio:      orDefault(l.MaxRatio, d.MaxRatio),
	}
}

// orDefault is v when it is set (positive), else def.
func orDefault[T int | int64 | float64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
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
	return drain(decompressed, "archive")
}

// drain reads a stream to its end after its last tar entry, so that
// trailing garbage or a bad checksum is caught, not ignored. what names the
// stream in the refusal.
func drain(r io.Reader, what string) error {
	if _, err := io.Copy(io.Discard, r); err != nil {
		if errors.Is(err, ErrRefused) {
			return err
		}
		return refuse("%s is corrupt after its last entry: %v", what, err)
	}
	return nil
}

// unpackTar applies the entry rules to a tar stream. rename, when set, maps
// each header's name first (skip drops the entry).
func unpackTar(tr *tar.Reader, lim Limits, out sink, rename func(*tar.Header) (name string, skip bool, err error)) error {
	seen := map[string]string{}  // path -> type
	links := map[string]string{} // symlink -> target
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
		if err := checkEntry(hdr, name, lim, seen); err != nil {
			return err
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
			links[name] = hdr.Linkname
		}
	}
	return checkTreeLinks(seen, links)
}

// checkEntry applies the rules that one entry must pass on its own and
// against what the archive made before it.
func checkEntry(hdr *tar.Header, name string, lim Limits, seen map[string]string) error {
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
