package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteBeneath: a tree read beneath its root follows no symlink on the
// way to a file (a directory swapped for a link to elsewhere fails the
// snapshot, which read by path would take the other file's bytes), keeps
// symlinks as links, and refuses a file of another owner. The fallback
// for kernels without openat2 refuses the same.
func TestWriteBeneath(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(outside, "token"), []byte("frt_secret"), 0o600)
	os.Symlink(outside, filepath.Join(root, "z"))
	os.Mkdir(filepath.Join(root, "d"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "f"), []byte("mine"), 0o644)
	os.Symlink("f", filepath.Join(root, "d", "l"))
	me := os.Getuid()
	write := func(paths []string, owner int) error {
		_, err := Write(&bytes.Buffer{}, &Tree{Root: root, Paths: paths, Beneath: true, Owner: owner})
		return err
	}
	if err := write([]string{"d/f", "d/l"}, me); err != nil {
		t.Fatalf("a file and a link inside: %v", err)
	}
	// The same tree read beneath and by path is the same snapshot.
	os.WriteFile(filepath.Join(root, "d", "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	paths := []string{"d/f", "d/l", "d/run.sh"}
	under, err := Write(&bytes.Buffer{}, &Tree{Root: root, Paths: paths, Dirs: []string{"empty"}, Beneath: true, Owner: me})
	if err != nil {
		t.Fatal(err)
	}
	byPath, err := Write(&bytes.Buffer{}, &Tree{Root: root, Paths: paths, Dirs: []string{"empty"}, Owner: -1})
	if err != nil || under.ManifestDigest != byPath.ManifestDigest || under.BlobDigest != byPath.BlobDigest {
		t.Fatalf("beneath %+v, by path %+v (%v): want the same snapshot", under.Manifest, byPath, err)
	}
	if err := write([]string{"z/token"}, me); err == nil {
		t.Error("read a file through a link to another directory")
	}
	// By path (the CLI's tree) a linked directory is refused too, as it is
	// found before the file is read; Beneath also holds while the tree
	// changes under it.
	if _, err := Write(&bytes.Buffer{}, &Tree{Root: root, Paths: []string{"z/token"}, Owner: -1}); err == nil ||
		!strings.Contains(err.Error(), "which is not a directory") {
		t.Fatalf("by path (the CLI's tree): %v", err)
	}
	if err := write([]string{"d/f"}, me+1); err == nil || !strings.Contains(err.Error(), "belongs to user") {
		t.Errorf("another owner's file: %v", err)
	}
	b, err := openBeneathRoot(root, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if fd, err := b.openByElements("d/f", 0); err != nil {
		t.Errorf("fallback, a file inside: %v", err)
	} else {
		unix.Close(fd)
	}
	if _, err := b.openByElements("z/token", 0); err == nil {
		t.Error("the fallback read through a link")
	}
}
