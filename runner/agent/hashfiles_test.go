package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHashFiles: GitHub's hashFiles over the workspace: the SHA-256 of
// the matching files' SHA-256s in path order, ! excluding, "" for none;
// links are not followed (a link to a file outside, or a directory
// swapped for a link, is not read), FIFOs are passed over.
func TestHashFiles(t *testing.T) {
	ws := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	write := func(rel, content string) {
		p := filepath.Join(ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.sum", "a")
	write("sub/go.sum", "b")
	write("vendor/go.sum", "c")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "link"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link", "go.sum")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo.sum"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := func(contents ...string) string {
		all := sha256.New()
		for _, c := range contents {
			s := sha256.Sum256([]byte(c))
			all.Write(s[:])
		}
		return hex.EncodeToString(all.Sum(nil))
	}
	for _, tc := range []struct {
		patterns []string
		want     string
	}{
		{[]string{"**/go.sum"}, want("a", "b", "c")},
		{[]string{"**/go.sum", "!vendor/**"}, want("a", "b")},
		{[]string{"sub/*.sum", "go.sum"}, want("a", "b")},
		{[]string{"*.sum"}, want("a")},
		{[]string{"*.none"}, ""},
	} {
		got, err := hashFiles(ctx, ws, -1, tc.patterns)
		if err != nil || got != tc.want {
			t.Errorf("hashFiles(%q) = %q, %v; want %q", tc.patterns, got, err, tc.want)
		}
	}
	if _, err := hashFiles(ctx, ws, -1, []string{"[a"}); err == nil || !strings.Contains(err.Error(), "not a valid pattern") {
		t.Errorf("bad pattern: %v", err)
	}
	// A directory swapped for a link after the walk: opened beneath the
	// workspace without links, so the file outside is never read.
	root, err := os.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := os.RemoveAll(filepath.Join(ws, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(ws, "sub")); err != nil {
		t.Fatal(err)
	}
	if _, err := hashBeneath(ctx, root, "sub/secret", -1); err == nil {
		t.Fatal("a file reached through a swapped-in link was read")
	}
	// Another user's file linked in (as root, the test may link any file).
	if os.Geteuid() == 0 {
		if err := os.Chown(outside, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(outside, filepath.Join(ws, "hard.sum")); err != nil {
			t.Fatal(err)
		}
		if _, err := hashFiles(ctx, ws, 4242, []string{"hard.sum"}); err == nil || !strings.Contains(err.Error(), "hard link") {
			t.Fatalf("hard link to another's file: %v", err)
		}
	}
	// Nesting past maxHashDepth is refused, not walked a descriptor a level.
	deep := filepath.Join(ws, strings.Repeat("d/", maxHashDepth+1))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := hashFiles(ctx, ws, -1, []string{"*.sum"}); err == nil || !strings.Contains(err.Error(), "nest deeper than") {
		t.Fatalf("directories %d deep: %v", maxHashDepth+1, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := hashFiles(canceled, ws, -1, []string{"**"}); err == nil {
		t.Fatal("a stopped job's hashFiles went on")
	}
}
