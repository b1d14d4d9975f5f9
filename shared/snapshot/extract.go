package snapshot

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

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
	lim = lim.withDefaults()
	root, err := os.OpenRoot(dest)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	if names, err := readDirNames(root); err != nil || len(names) > 0 {
		return nil, fmt.Errorf("workspace %s must be an empty directory", dest)
	}
	compressed := &countingReader{r: blob}
	dec, err := zstd.NewReader(compressed, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderMaxWindow(32<<20))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	decompressed := &countingReader{r: dec}
	tr := tar.NewReader(decompressed)
	seen := map[string]string{} // path -> type
	var files int
	var total int64
	buf := make([]byte, 256<<10)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, refuse("archive is corrupt: %v", err)
		}
		files++
		if files > lim.MaxFiles {
			return nil, refuse("more than %d entries", lim.MaxFiles)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if hdr.Typeflag == tar.TypeDir && name == "" {
			return nil, refuse("entry %q names the root", hdr.Name)
		}
		if err := CheckPath(name, lim.MaxPathLen); err != nil {
			return nil, refuse("%v", err)
		}
		if depth := strings.Count(name, "/") + 1; depth > lim.MaxDepth {
			return nil, refuse("path %.80q is %d levels deep, over the limit of %d", name, depth, lim.MaxDepth)
		}
		if _, dup := seen[name]; dup {
			return nil, refuse("duplicate entry %q", name)
		}
		// No entry may pass through a symlink this archive made, even one
		// pointing inside the tree: the manifest would no longer describe
		// what the job sees.
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			switch seen[p] {
			case TypeSymlink:
				return nil, refuse("entry %q is written through the symlink %q", name, p)
			case TypeFile:
				return nil, refuse("entry %q is inside the file %q", name, p)
			}
		}
		if hdr.Mode&0o7000 != 0 {
			return nil, refuse("entry %q has setuid, setgid or sticky bits (mode %o)", name, hdr.Mode)
		}
		if err := mkdirParents(root, name, seen); err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil {
				return nil, refuse("directory %q: %v", name, err)
			}
			seen[name] = TypeDir
		case tar.TypeReg:
			if hdr.Size < 0 || hdr.Size > lim.MaxFileBytes {
				return nil, refuse("file %q is %d bytes, over the limit of %d", name, hdr.Size, lim.MaxFileBytes)
			}
			total += hdr.Size
			if total > lim.MaxTotalBytes {
				return nil, refuse("files total more than %d bytes", lim.MaxTotalBytes)
			}
			if err := writeFile(root, name, NormalFileMode(fs.FileMode(hdr.Mode)), tr, hdr.Size, buf, compressed, decompressed, lim.MaxRatio); err != nil {
				return nil, err
			}
			seen[name] = TypeFile
		case tar.TypeSymlink:
			if err := CheckSymlink(name, hdr.Linkname); err != nil {
				return nil, refuse("%v", err)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return nil, refuse("symlink %q: %v", name, err)
			}
			seen[name] = TypeSymlink
		case tar.TypeLink:
			return nil, refuse("entry %q is a hard link", name)
		case tar.TypeChar, tar.TypeBlock:
			return nil, refuse("entry %q is a device", name)
		case tar.TypeFifo:
			return nil, refuse("entry %q is a FIFO", name)
		default:
			return nil, refuse("entry %q has unsupported type %q", name, hdr.Typeflag)
		}
		if err := checkRatio(compressed, decompressed, lim.MaxRatio); err != nil {
			return nil, err
		}
	}
	// Drain the zstd stream so that trailing garbage or a bad checksum is
	// caught, not ignored.
	if _, err := io.Copy(io.Discard, decompressed); err != nil {
		return nil, refuse("archive is corrupt after its last entry: %v", err)
	}
	return ManifestOf(root)
}

// mkdirParents creates the parents of name that the archive did not list.
func mkdirParents(root *os.Root, name string, seen map[string]string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	var missing []string
	for p := dir; p != "."; p = path.Dir(p) {
		if seen[p] == TypeDir {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := root.Mkdir(missing[i], 0o755); err != nil {
			return refuse("directory %q: %v", missing[i], err)
		}
		seen[missing[i]] = TypeDir
	}
	return nil
}

func writeFile(root *os.Root, name string, mode fs.FileMode, r io.Reader, size int64, buf []byte,
	compressed, decompressed *countingReader, maxRatio float64) error {
	// O_EXCL: never open something that is already there (a symlink, say).
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return refuse("file %q: %v", name, err)
	}
	defer f.Close()
	var written int64
	for written < size {
		chunk := buf[:min(int64(len(buf)), size-written)]
		n, err := io.ReadFull(r, chunk)
		if n > 0 {
			if _, werr := f.Write(chunk[:n]); werr != nil {
				return fmt.Errorf("write %s: %w", name, werr)
			}
			written += int64(n)
		}
		if err != nil {
			return refuse("file %q is truncated: %v", name, err)
		}
		if err := checkRatio(compressed, decompressed, maxRatio); err != nil {
			return err
		}
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Close()
}

func checkRatio(compressed, decompressed *countingReader, maxRatio float64) error {
	if d := decompressed.n; d > ratioSlack && float64(d) > maxRatio*float64(compressed.n) {
		return refuse("compression ratio over %.0f:1 (%d bytes from %d): a decompression bomb", maxRatio, d, compressed.n)
	}
	return nil
}

// ManifestOf computes the manifest of the tree under root from disk.
func ManifestOf(root *os.Root) (Manifest, error) {
	var m Manifest
	buf := make([]byte, 256<<10)
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		info, err := root.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			m = append(m, Entry{Path: p, Type: TypeDir, Mode: 0o755})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if err != nil {
				return err
			}
			m = append(m, Entry{Path: p, Type: TypeSymlink, Mode: 0o777, Size: int64(len(target)), SHA256: hashString(target), Target: target})
		case info.Mode().IsRegular():
			f, err := root.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			n, err := io.CopyBuffer(h, f, buf)
			f.Close()
			if err != nil {
				return err
			}
			m = append(m, Entry{Path: p, Type: TypeFile, Mode: NormalFileMode(info.Mode()), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		default:
			return fmt.Errorf("%s is a %s", p, info.Mode().Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("manifest of workspace: %w", err)
	}
	m.Sort()
	return m, nil
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

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
