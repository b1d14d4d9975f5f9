package snapshot_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/snapshot"
)

// TestLinksInsideAreKept: links that resolve inside the tree, also through
// one another, and dangling ones, are extracted as they are.
func TestLinksInsideAreKept(t *testing.T) {
	entries := []tarEntry{
		reg("lib/v1/tool", "#!/bin/sh\n"),
		symlink("lib/current", "v1"),
		symlink("bin/tool", "../lib/current/tool"),
		symlink("a/b/up", ".."),
		symlink("a/again", "b/up/b/up/b"),
		symlink("dangling", "missing/../x"),
		symlink("file-then-more", "lib/v1/tool/../../v1"),
	}
	_, ws := canaryWorkspace(t)
	m, err := snapshot.Extract(bytes.NewReader(buildArchive(t, entries)), ws, snapshot.Limits{})
	if err != nil {
		t.Fatalf("a tree whose links stay inside was refused: %v", err)
	}
	if len(m) == 0 {
		t.Fatal("empty manifest")
	}
	if b, err := os.ReadFile(filepath.Join(ws, "bin/tool")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Fatalf("bin/tool through lib/current: %q %v", b, err)
	}
	if err := snapshot.CheckLinks(ws); err != nil {
		t.Fatalf("CheckLinks refuses the same tree: %v", err)
	}
}

// TestCheckLinksAcrossTrees: a source and a cache each pass alone; merged
// into one workspace, the cache's link leads out through the source's. The
// runner checks the workspace after merging and refuses it.
func TestCheckLinksAcrossTrees(t *testing.T) {
	parent, ws := canaryWorkspace(t)
	source := []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "a/b/", Mode: 0o755}}, symlink("a/b/up", "..")}
	if _, err := snapshot.Extract(bytes.NewReader(buildArchive(t, source)), ws, snapshot.Limits{}); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(parent, "cache")
	os.Mkdir(cache, 0o755)
	defer os.RemoveAll(cache)
	if _, err := snapshot.Extract(bytes.NewReader(buildArchive(t, []tarEntry{symlink("y", "a/b/up/b/up/../../canary")})), cache, snapshot.Limits{}); err != nil {
		t.Fatalf("the cache alone was refused: %v", err)
	}
	if err := snapshot.CheckLinks(ws); err != nil {
		t.Fatalf("the source alone: %v", err)
	}
	if err := os.Rename(filepath.Join(cache, "y"), filepath.Join(ws, "y")); err != nil {
		t.Fatal(err)
	}
	// The kernel agrees that y leads to the canary ...
	if b, err := os.ReadFile(filepath.Join(ws, "y")); err != nil || string(b) != "canary" {
		t.Fatalf("the test's tree does not escape: %q %v", b, err)
	}
	// ... and CheckLinks refuses it.
	if err := snapshot.CheckLinks(ws); !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("merged trees whose links lead out: %v", err)
	}
	os.Remove(filepath.Join(ws, "y"))
	os.Symlink("/etc/passwd", filepath.Join(ws, "abs"))
	if err := snapshot.CheckLinks(ws); !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("an absolute link: %v", err)
	}
}

// TestSnapshotReadsNoFileThroughALinkedDirectory: a path git tracks
// (conf/settings.txt) whose directory in the work tree has since become a
// link to elsewhere is refused, not read from outside the checkout.
func TestSnapshotReadsNoFileThroughALinkedDirectory(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "settings.txt"), []byte("OUTSIDE-SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=a", "-c", "user.email=a@b"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	git("init", "-q")
	if err := os.MkdirAll(filepath.Join(repo, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "conf", "settings.txt"), []byte("template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "x")
	if err := os.RemoveAll(filepath.Join(repo, "conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(repo, "conf")); err != nil {
		t.Fatal(err)
	}
	tree, err := snapshot.GitTree(repo, false)
	if err != nil {
		t.Fatal(err)
	}
	var blob bytes.Buffer
	_, err = snapshot.Write(&blob, tree)
	if err == nil || !strings.Contains(err.Error(), "conf/settings.txt is under conf, which is not a directory") {
		t.Fatalf("a tracked file under a linked directory: %v", err)
	}
	if bytes.Contains(blob.Bytes(), []byte("OUTSIDE")) {
		t.Fatal("the file outside the checkout was read")
	}
}
