package scm_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/forgeci/forgeci/shared/store"
)

// TestTreeTooLargeFailsAtOnce: a commit whose tree does not fit in the
// worker's temporary space fails its delivery at once, saying so, instead
// of being downloaded again at every retry (the extractor refuses an
// archive it cannot write out, and a refused archive is permanent).
func TestTreeTooLargeFailsAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs as root)")
	}
	e := setup(t)
	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=128k"); err != nil {
		t.Fatalf("mount a 128 KiB tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(small, 0) })
	e.worker.TempDir = small
	dir, _ := gitRepo(t, pipelineYAML)
	big := make([]byte, 512<<10)
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "big")
	sha := strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "g-big", body, sign(repoSecret, body))
	if res := e.runOnce(); res.Failed != 1 || res.Retried != 0 {
		t.Fatalf("a tree larger than the worker's disk: %+v, want failed at once", res)
	}
	var state, lastError string
	if err := e.pool.QueryRow(t.Context(), `SELECT state, coalesce(last_error, '') FROM scm_deliveries WHERE guid = 'g-big'`).Scan(&state, &lastError); err != nil {
		t.Fatal(err)
	}
	if state != store.DeliveryFailed || !strings.Contains(lastError, "no space left on device") {
		t.Fatalf("the delivery: %s %q", state, lastError)
	}
}
