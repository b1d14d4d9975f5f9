package snapshot_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
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
