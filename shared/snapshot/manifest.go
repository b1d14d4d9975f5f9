// Package snapshot makes and checks ForgeCI's immutable sources: a
// deterministic tar stream compressed with zstd (the blob, named by the
// SHA-256 of its compressed bytes) and a canonical manifest of the tree it
// holds (named by the SHA-256 of its encoding). The same tree gives the same
// manifest digest on any machine; the blob digest is the same for the same
// tree and the same compressor version.
//
// # Manifest encoding (version 1)
//
// The manifest is UTF-8 text. Its first line is "forgeci-manifest-v1". Then
// one line per entry, sorted by path (bytewise), each ending in "\n":
//
//	<type> SP <mode> SP <size> SP <sha256> SP <path>
//
// type is "d" (directory), "f" (regular file) or "l" (symbolic link); mode is
// four octal digits: 0755 for directories, 0644 or 0755 for files (0755 when
// any execute bit is set), 0777 for links; size is decimal bytes (the length
// of the link target for links, 0 for directories); sha256 is 64 lowercase
// hex digits of the file's content (of the link target for links), or "-"
// for directories; path is relative, slash-separated, without "." or ".."
// elements, and holds no control characters. The manifest digest is
// "sha256:" + hex(SHA-256(manifest bytes)).
package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"unicode/utf8"
)

// Entry types.
const (
	TypeDir     = "d"
	TypeFile    = "f"
	TypeSymlink = "l"
)

const manifestHeader = "forgeci-manifest-v1\n"

// Entry is one line of a manifest.
type Entry struct {
	Path   string
	Type   string
	Mode   fs.FileMode // normalised: 0755, 0644 or 0777
	Size   int64
	SHA256 string // hex; empty for directories
	// Target is a symlink's target.
	Target string
}

// Manifest is a sorted list of entries.
type Manifest []Entry

// Sort orders the entries canonically.
func (m Manifest) Sort() { sort.Slice(m, func(i, j int) bool { return m[i].Path < m[j].Path }) }

// Encode writes the canonical encoding.
func (m Manifest) Encode(w io.Writer) error {
	if _, err := io.WriteString(w, manifestHeader); err != nil {
		return err
	}
	for _, e := range m {
		sum := e.SHA256
		if e.Type == TypeDir {
			sum = "-"
		}
		if _, err := fmt.Fprintf(w, "%s %04o %d %s %s\n", e.Type, e.Mode.Perm(), e.Size, sum, e.Path); err != nil {
			return err
		}
	}
	return nil
}

// Digest returns "sha256:<hex>" of the canonical encoding.
func (m Manifest) Digest() string {
	h := sha256.New()
	_ = m.Encode(h) // a hash never fails to write
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// NormalFileMode maps a file's permission bits to 0755 or 0644.
func NormalFileMode(m fs.FileMode) fs.FileMode {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// CheckPath reports whether p is an acceptable tree path: relative, clean,
// slash-separated, valid UTF-8, no control characters, at most maxLen bytes.
func CheckPath(p string, maxLen int) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("empty path")
	case len(p) > maxLen:
		return fmt.Errorf("path %.60q... is %d bytes long, over the limit of %d", p, len(p), maxLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not valid UTF-8", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	case p != path.Clean(p):
		return fmt.Errorf("path %q is not clean (use %q)", p, path.Clean(p))
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q leaves the tree", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("path %q holds a control character", p)
		}
	}
	return nil
}

// CheckSymlink reports whether a link at p with target stays in the tree.
func CheckSymlink(p, target string) error {
	switch {
	case target == "":
		return fmt.Errorf("symlink %q has an empty target", p)
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("symlink %q points to the absolute path %q", p, target)
	}
	resolved := path.Join(path.Dir(p), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("symlink %q points outside the tree (%q)", p, target)
	}
	if resolved == "." {
		return fmt.Errorf("symlink %q points to the root of the tree", p)
	}
	return nil
}

func hashString(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}
