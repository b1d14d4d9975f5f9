package snapshot_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/snapshot/snapshottest"
)

func writeTree(t *testing.T, root string, files map[string]string, order []string) {
	t.Helper()
	for _, p := range order {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		content := files[p]
		if target, ok := strings.CutPrefix(content, "symlink:"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(content, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

func snap(t *testing.T, root string) *snapshot.Result {
	t.Helper()
	blob, res := snapshottest.Of(t, root)
	if int64(len(blob)) != res.Size {
		t.Fatalf("size %d, wrote %d", res.Size, len(blob))
	}
	return res
}

var sample = map[string]string{
	"README.md":     "# hello\n",
	"src/main.go":   "package main\n\nfunc main() {}\n",
	"src/util/u.go": "package util\n",
	// Sorted, these interleave directories ("src/util-x" sorts between
	// "src/util" and its files), so extraction leaves and re-enters them.
	"src/util-x/v.go":      "package utilx\n",
	"src/util/deeper/w.go": "package deeper\n",
	"src/util/zz.go":       "package util\n",
	"scripts/build.sh":     "#!/bin/sh\necho build\n",
	"docs/link-to-src":     "symlink:../src",
	"empty-dir/.keep":      "",
	".forgeci.yml":         "jobs: {}\n",
	"z/very/deep/a.txt":    "a",
}

// TestDeterminism: the same tree built in a different order, with
// different mtimes and umask, gives the same digests; one byte changes both.
func TestDeterminism(t *testing.T) {
	var order []string
	for p := range sample {
		order = append(order, p)
	}
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a, sample, order)
	for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
		order[i], order[j] = order[j], order[i]
	}
	writeTree(t, b, sample, order)
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	_ = filepath.Walk(b, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, past, past) })
	// A group-writable file is normalised to 0644 like any other.
	if err := os.Chmod(filepath.Join(b, "README.md"), 0o664); err != nil {
		t.Fatal(err)
	}
	ra, rb := snap(t, a), snap(t, b)
	if ra.BlobDigest != rb.BlobDigest || ra.ManifestDigest != rb.ManifestDigest {
		t.Fatalf("same tree, different digests:\n%+v\n%+v", ra, rb)
	}
	if again := snap(t, a); again.BlobDigest != ra.BlobDigest {
		t.Fatal("snapshotting twice gave different blobs")
	}
	if err := os.WriteFile(filepath.Join(b, "src/util/u.go"), []byte("package utiL\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc := snap(t, b)
	if rc.BlobDigest == ra.BlobDigest || rc.ManifestDigest == ra.ManifestDigest {
		t.Fatal("a one-byte change did not change the digests")
	}
	if err := os.Chmod(filepath.Join(a, "README.md"), 0o755); err != nil {
		t.Fatal(err)
	}
	if rd := snap(t, a); rd.ManifestDigest == ra.ManifestDigest {
		t.Fatal("making a file executable did not change the manifest")
	}
}

// TestRoundTrip: extraction writes exactly the tree, with the same manifest.
func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	var order []string
	for p := range sample {
		order = append(order, p)
	}
	writeTree(t, src, sample, order)
	tree, err := snapshot.DirTree(src)
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(t.TempDir(), "blob")
	f, _ := os.Create(blob)
	res, err := snapshot.Write(f, tree)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.VerifyFile(blob, res.BlobDigest, res.Size); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	m, err := snapshot.ExtractVerified(blob, dest, res.ManifestDigest, snapshot.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != len(res.Manifest) {
		t.Fatalf("extracted %d entries, snapshot had %d", len(m), len(res.Manifest))
	}
	got, _ := os.ReadFile(filepath.Join(dest, "scripts/build.sh"))
	fi, _ := os.Stat(filepath.Join(dest, "scripts/build.sh"))
	if string(got) != sample["scripts/build.sh"] || fi.Mode().Perm() != 0o755 {
		t.Fatalf("build.sh: %q %v", got, fi.Mode())
	}
	if target, _ := os.Readlink(filepath.Join(dest, "docs/link-to-src")); target != "../src" {
		t.Fatalf("symlink target %q", target)
	}
	// Inspect computes the same manifest from the stream and returns the
	// files asked for.
	bf, _ := os.Open(blob)
	defer bf.Close()
	im, files, err := snapshot.Inspect(bf, snapshot.Limits{}, []string{".forgeci.yml"}, 1<<20)
	if err != nil || im.Digest() != res.ManifestDigest || string(files[".forgeci.yml"]) != sample[".forgeci.yml"] {
		t.Fatalf("inspect: %v %s %q", err, im.Digest(), files[".forgeci.yml"])
	}
}

// TestTampering: a changed blob byte fails the blob digest; a blob that is
// self-consistent but of another tree fails the manifest digest.
func TestTampering(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{"a.txt": "alpha\n", "b.txt": "beta\n"}, []string{"a.txt", "b.txt"})
	tree, _ := snapshot.DirTree(src)
	dir := t.TempDir()
	blob := filepath.Join(dir, "blob")
	f, _ := os.Create(blob)
	res, err := snapshot.Write(f, tree)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(blob)
	raw[len(raw)/2] ^= 1
	tampered := filepath.Join(dir, "tampered")
	_ = os.WriteFile(tampered, raw, 0o644)
	if err := snapshot.VerifyFile(tampered, res.BlobDigest, res.Size); !errors.Is(err, snapshot.ErrDigestMismatch) {
		t.Fatalf("tampered blob verified: %v", err)
	}
	// Another tree's valid blob under this run's manifest digest.
	_ = os.WriteFile(filepath.Join(src, "b.txt"), []byte("BETA\n"), 0o644)
	tree2, _ := snapshot.DirTree(src)
	other := filepath.Join(dir, "other")
	f, _ = os.Create(other)
	if _, err := snapshot.Write(f, tree2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := snapshot.ExtractVerified(other, t.TempDir(), res.ManifestDigest, snapshot.Limits{}); !errors.Is(err, snapshot.ErrDigestMismatch) {
		t.Fatalf("manifest mismatch not detected: %v", err)
	}
}

// TestSnapshotRefusesEscapingSymlinks: a tree with a symlink out of it
// cannot be snapshotted, with a message naming the link.
func TestSnapshotRefusesEscapingSymlinks(t *testing.T) {
	for _, target := range []string{"/etc/passwd", "../../outside"} {
		src := t.TempDir()
		writeTree(t, src, map[string]string{"bad": "symlink:" + target}, []string{"bad"})
		tree, _ := snapshot.DirTree(src)
		if _, err := snapshot.Write(&bytes.Buffer{}, tree); err == nil || !strings.Contains(err.Error(), `"bad"`) {
			t.Fatalf("symlink to %s: %v", target, err)
		}
	}
}

// TestGitTree: a git checkout snapshots what git tracks, optionally the
// untracked-but-not-ignored files, and records commit and dirtiness apart.
func TestGitTree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@e"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	run("init", "-q")
	writeTree(t, dir, map[string]string{"tracked.txt": "t\n", ".gitignore": "ignored.txt\n"}, []string{"tracked.txt", ".gitignore"})
	run("add", ".")
	run("commit", "-q", "-m", "one")
	writeTree(t, dir, map[string]string{"ignored.txt": "i\n", "new.txt": "n\n"}, []string{"ignored.txt", "new.txt"})
	if !snapshot.IsGitCheckout(dir) {
		t.Fatal("not detected as a git checkout")
	}
	tree, err := snapshot.GitTree(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tree.Paths, ",") != ".gitignore,tracked.txt" || len(tree.GitSHA) != 40 || tree.GitDirty {
		t.Fatalf("tracked only: %+v", tree)
	}
	tree, _ = snapshot.GitTree(dir, true)
	if strings.Join(tree.Paths, ",") != ".gitignore,new.txt,tracked.txt" || !tree.GitDirty {
		t.Fatalf("with untracked: %+v", tree)
	}
	_ = os.WriteFile(filepath.Join(dir, "tracked.txt"), []byte("changed\n"), 0o644)
	tree, _ = snapshot.GitTree(dir, false)
	if !tree.GitDirty {
		t.Fatal("modified tracked file not dirty")
	}
}

// TestEncoderPinned: the blob digest of a fixed input never changes, so a
// library or setting change that would alter blobs fails here first. The
// big file makes the tar span several of the encoder's parallel jobs.
func TestEncoderPinned(t *testing.T) {
	src := t.TempDir()
	content := strings.Repeat("ForgeCI pins its compressor settings.\n", 40000)
	var big strings.Builder
	for i := range 1200000 {
		fmt.Fprintf(&big, "%d %x\n", i, uint32(i)*2654435761)
	}
	writeTree(t, src, map[string]string{"a.txt": content, "b/c.txt": "small\n", "big.txt": big.String()},
		[]string{"a.txt", "b/c.txt", "big.txt"})
	r := snap(t, src)

	t.Logf("blob %s manifest %s", r.BlobDigest, r.ManifestDigest)
	if r.BlobDigest != pinnedBlob || r.ManifestDigest != pinnedManifest {
		t.Fatalf("digests changed: blob %s manifest %s", r.BlobDigest, r.ManifestDigest)
	}

}
