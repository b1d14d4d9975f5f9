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
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// epoch is the modification time of every entry: a snapshot must not
// depend on when files were touched.
var epoch = time.Unix(0, 0).UTC()

// Result describes a written snapshot.
type Result struct {
	BlobDigest     string // sha256:<hex> of the compressed bytes
	ManifestDigest string // sha256:<hex> of the canonical manifest
	Size           int64  // compressed bytes
	Manifest       Manifest
	// Git facts, recorded apart from the digests (empty outside git).
	GitSHA   string
	GitDirty bool
}

// Tree is a set of paths under Root to snapshot.
type Tree struct {
	Root string
	// Paths are files and symlinks (slash-separated, relative to Root).
	Paths []string
	// Dirs are directories to record even when empty.
	Dirs     []string
	GitSHA   string
	GitDirty bool
	// GitBranch is the checked-out branch (empty when detached).
	GitBranch string
	// Beneath reads every file and symlink under Root without following
	// a symbolic link on the way, and fails if one is not what its walk
	// found (another's file, or other bytes): for a tree that processes of
	// another user may change while it is read (a job's workspace). Linux
	// only. Owner, when not -1, is the uid every file read must have.
	Beneath bool
	Owner   int
}

// MaxPathLen is the longest path a snapshot may hold (and extraction accepts).
const MaxPathLen = 1024

// DirTree lists everything under root except the .git directory.
func DirTree(root string) (*Tree, error) {
	t := &Tree{Root: root}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			t.Dirs = append(t.Dirs, rel)
			return nil
		}
		t.Paths = append(t.Paths, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	return t, nil
}

// GitTree lists what git tracks in the checkout at root (and, with
// untracked, files that are untracked but not ignored), and records the
// commit and whether the tree differs from it. Submodules are not included.
func GitTree(root string, untracked bool) (*Tree, error) {
	t := &Tree{Root: root}
	out, err := git(root, "ls-files", "-z", "--stage")
	if err != nil {
		return nil, err
	}
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		// "<mode> <object> <stage>\t<path>"
		meta, p, ok := strings.Cut(rec, "\t")
		if !ok || strings.HasPrefix(meta, "160000 ") { // a submodule (gitlink)
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(p))); errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree; the tree is dirty
		}
		t.Paths = append(t.Paths, p)
	}
	if untracked {
		out, err := git(root, "ls-files", "-z", "--others", "--exclude-standard")
		if err != nil {
			return nil, err
		}
		for _, p := range strings.Split(string(out), "\x00") {
			if p != "" {
				t.Paths = append(t.Paths, p)
			}
		}
	}
	t.Paths = dedupe(t.Paths)
	if sha, err := git(root, "rev-parse", "--verify", "-q", "HEAD"); err == nil {
		t.GitSHA = strings.TrimSpace(string(sha))
	}
	if branch, err := git(root, "symbolic-ref", "-q", "--short", "HEAD"); err == nil {
		t.GitBranch = strings.TrimSpace(string(branch))
	}
	status, err := git(root, "status", "--porcelain", "--untracked-files="+map[bool]string{true: "normal", false: "no"}[untracked])
	if err != nil {
		return nil, err
	}
	t.GitDirty = len(bytes.TrimSpace(status)) > 0 || t.GitSHA == ""
	return t, nil
}

// IsGitCheckout reports whether dir is the top of a git work tree.
func IsGitCheckout(dir string) bool {
	out, err := git(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return false
	}
	top, err1 := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
	abs, err2 := filepath.EvalSymlinks(dir)
	return err1 == nil && err2 == nil && top == abs
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "core.quotepath=off"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// NewEncoder returns the zstd encoder every snapshot uses. Its settings are
// fixed so that the same tar bytes always compress to the same blob on any
// machine: level 3 (SpeedDefault) with a 2 MiB window, CRC on, and
// job-based parallel blocks with two workers.
//
// The window is what `zstd -3` itself uses for large inputs; the library's
// 8 MiB default gave blobs under 1% smaller for four times the memory, and
// the page faults of that memory made snapshots a fifth slower. The
// split into jobs (4 windows each) depends on the window, not on the worker
// count or timing (TestEncoderJobs), but one worker turns the split off,
// so encoderOptions must keep at least two.
func NewEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, encoderOptions(2)...)
}

func encoderOptions(workers int) []zstd.EOption {
	return []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(2 << 20),
		zstd.WithEncoderConcurrency(workers), zstd.WithConcurrentBlocks(true),
		zstd.WithEncoderCRC(true), zstd.WithZeroFrames(true)}
}

// Write streams the tree as a snapshot blob to w, hashing while it writes;
// nothing is held in memory but one file buffer.
func Write(w io.Writer, t *Tree) (*Result, error) {
	var b *beneath
	if t.Beneath {
		var err error
		if b, err = openBeneathRoot(t.Root, t.Owner); err != nil {
			return nil, err
		}
		defer b.Close()
	}
	entries, err := collect(t, b)
	if err != nil {
		return nil, err
	}
	blobHash := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(w, blobHash)}
	enc, err := NewEncoder(counter)
	if err != nil {
		return nil, err
	}
	// The tar stream goes straight into the encoder: with concurrency it
	// compresses filled sections in its own goroutines while this one goes
	// on reading and hashing files, two stages like tar | zstd, without a
	// pipe copying every byte once more between them.
	tw := tar.NewWriter(enc)
	fail := func(err error) (*Result, error) {
		enc.Close()
		return nil, err
	}
	var m Manifest
	buf := make([]byte, 256<<10)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Path, ModTime: epoch, Mode: int64(e.Mode), Format: tar.FormatPAX}
		switch e.Type {
		case TypeDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.Path+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return fail(err)
			}
		case TypeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
			e.Size, e.SHA256 = int64(len(e.Target)), hashString(e.Target)
			if err := tw.WriteHeader(hdr); err != nil {
				return fail(err)
			}
		case TypeFile:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
			if err := tw.WriteHeader(hdr); err != nil {
				return fail(err)
			}
			sum, err := copyTreeFile(tw, t, b, e, buf)
			if err != nil {
				return fail(fmt.Errorf("snapshot %s: %w", e.Path, err))
			}
			e.SHA256 = sum
		}
		m = append(m, e)
	}
	if err := tw.Close(); err != nil {
		return fail(err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return &Result{
		BlobDigest: "sha256:" + hex.EncodeToString(blobHash.Sum(nil)), ManifestDigest: m.Digest(),
		Size: counter.n, Manifest: m, GitSHA: t.GitSHA, GitDirty: t.GitDirty,
	}, nil
}

// collect stats every path, normalises it and adds the parent directories
// of every entry, sorted; with b, symlinks are read beneath the root.
func collect(t *Tree, b *beneath) ([]Entry, error) {
	byPath, real := map[string]Entry{}, map[string]bool{}
	addDir := func(p string) {
		for p != "." && p != "" {
			if _, ok := byPath[p]; ok {
				return
			}
			byPath[p] = Entry{Path: p, Type: TypeDir, Mode: 0o755}
			p = path.Dir(p)
		}
	}
	for _, d := range t.Dirs {
		if err := CheckPath(d, MaxPathLen); err != nil {
			return nil, err
		}
		addDir(d)
	}
	for _, p := range t.Paths {
		if err := CheckPath(p, MaxPathLen); err != nil {
			return nil, err
		}
		full := filepath.Join(t.Root, filepath.FromSlash(p))
		if b == nil {
			if err := realParents(t.Root, p, real); err != nil {
				return nil, err
			}
		}
		fi, err := lstat(full, p, b)
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		var e Entry
		switch {
		case fi.Mode().IsRegular():
			e = Entry{Path: p, Type: TypeFile, Mode: NormalFileMode(fi.Mode()), Size: fi.Size()}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := readlink(full, p, b)
			if err != nil {
				return nil, fmt.Errorf("snapshot: %w", err)
			}
			if err := CheckSymlink(p, target); err != nil {
				return nil, fmt.Errorf("snapshot: %w: only relative symlinks inside the tree are kept", err)
			}
			e = Entry{Path: p, Type: TypeSymlink, Mode: 0o777, Target: target}
		case fi.IsDir():
			addDir(p)
			continue
		default:
			return nil, fmt.Errorf("snapshot: %s is a %s; only files, directories and symlinks can be snapshotted", p, fi.Mode().Type())
		}
		if prev, dup := byPath[p]; dup && prev.Type == TypeDir {
			return nil, fmt.Errorf("snapshot: %s is both a directory and a file", p)
		}
		byPath[p] = e
		addDir(path.Dir(p))
	}
	entries := make([]Entry, 0, len(byPath))
	for _, e := range byPath {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	return entries, nil
}

// copyFile copies exactly size bytes of the file into w and returns their
// SHA-256; a file that changes size while it is read is an error, not a
// silently different snapshot. Each read asks for one byte more than is
// left, so the short read that ends a regular file also shows that it did
// not grow, without a further read: system calls are a large part of a
// snapshot's time.
func copyFile(w io.Writer, name string, size int64, buf []byte) (string, error) {
	f, err := openForRead(name)
	if err != nil {
		return "", err
	}
	return copyFrom(w, f, size, buf)
}

// copyTreeFile copies entry e's file under t's root, beneath it with b.
func copyTreeFile(w io.Writer, t *Tree, b *beneath, e Entry, buf []byte) (string, error) {
	if b == nil {
		return copyFile(w, filepath.Join(t.Root, filepath.FromSlash(e.Path)), e.Size, buf)
	}
	f, err := b.openFile(e)
	if err != nil {
		return "", err
	}
	return copyFrom(w, f, e.Size, buf)
}

// copyFrom is copyFile's copy, from f, which it closes.
func copyFrom(w io.Writer, f io.ReadCloser, size int64, buf []byte) (string, error) {
	defer f.Close()
	h := sha256.New()
	left := size
	for {
		want := int(min(left+1, int64(len(buf))))
		n, err := f.Read(buf[:want])
		if int64(n) > left {
			return "", fmt.Errorf("file grew while being read")
		}
		if n > 0 {
			h.Write(buf[:n])
			if _, err := w.Write(buf[:n]); err != nil {
				return "", err
			}
			left -= int64(n)
		}
		if left == 0 && n < want {
			break
		}
		if err == io.EOF || (n == 0 && err == nil) {
			return "", fmt.Errorf("file shrank from %d to %d bytes while being read", size, size-left)
		}
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// realParents checks that every directory on rel's way down from root is
// one, not a symbolic link: a path git tracks as conf/settings.txt, with
// conf since swapped for a link, would otherwise read a file outside the
// tree (beneath does this for itself). real holds the directories seen.
func realParents(root, rel string, real map[string]bool) error {
	for d := path.Dir(rel); d != "." && !real[d]; d = path.Dir(d) {
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(d)))
		if err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("snapshot: %s is under %s, which is not a directory (a %s): only files inside the tree are read",
				rel, d, fi.Mode().Type())
		}
		real[d] = true
	}
	return nil
}

func lstat(full, rel string, b *beneath) (fs.FileInfo, error) {
	if b != nil {
		return b.lstat(rel)
	}
	return os.Lstat(full)
}

func readlink(full, rel string, b *beneath) (string, error) {
	if b != nil {
		return b.readlink(rel)
	}
	return os.Readlink(full)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// hashOf is a small helper for tests and callers that hash a reader.
func hashOf(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, err
}
