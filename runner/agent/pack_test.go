package agent

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/runner/isolate"
)

// TestPackRefusesOthersFiles: the runner (root) packs artifacts and caches
// from a workspace the steps wrote. A hard link there to a file of another
// user (the runner's token, say) is refused, not packed; so are paths that
// leave the workspace or pass through a link.
func TestPackRefusesOthersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("slot users need root (CI runs as root)")
	}
	const slotUser = "forgeci-slot10" // apart from other packages' runners
	u, err := user.Lookup(slotUser)
	if err != nil {
		t.Fatalf("slot user %s is missing: scripts/deps.sh makes it", slotUser)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	box, dir := packBox(t, isolate.Config{Mode: isolate.User, SlotUsers: []string{slotUser}})
	if err := box.HandOver(); err != nil {
		t.Fatal(err)
	}
	ws := box.Workspace()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("frt_secret"), 0o600)
	for _, d := range []string{"out", "linked"} {
		os.Mkdir(filepath.Join(ws, d), 0o755)
		os.Chown(filepath.Join(ws, d), uid, gid)
	}
	os.WriteFile(filepath.Join(ws, "out", "ok.txt"), []byte("built"), 0o644)
	os.Chown(filepath.Join(ws, "out", "ok.txt"), uid, gid)
	if err := os.Link(token, filepath.Join(ws, "linked", "t")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(dir, filepath.Join(ws, "via"))
	j := &job{box: box, ws: ws}
	blob, _, err := j.pack([]string{"out/"})
	if err != nil {
		t.Fatalf("the job's own files: %v", err)
	}
	os.Remove(blob)
	for paths, want := range map[string]string{
		"linked":    "not the job's",
		"via/token": "not a directory",
		"out/../..": "not inside the workspace",
	} {
		if _, _, err := j.pack([]string{paths}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pack %s: %v, want %q", paths, err, want)
		}
	}
}

// TestPackSwapAfterTheWalk: a directory the walk found in the workspace,
// swapped for a link to the runner's directory before its files are read
// (by another slot's process, which the job's kill does not stop), fails
// the pack: the runner's token of the same size is not read into it.
func TestPackSwapAfterTheWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the runner's box needs root (CI runs as root)")
	}
	box, dir := packBox(t, isolate.Config{Mode: isolate.None})
	ws := box.Workspace()
	secret := []byte("frt_secret")
	os.WriteFile(filepath.Join(dir, "token"), secret, 0o600)
	os.Mkdir(filepath.Join(ws, "z"), 0o755)
	os.WriteFile(filepath.Join(ws, "z", "token"), []byte("0123456789"), 0o600)
	afterPackWalk = func(ws string) {
		if err := os.Rename(filepath.Join(ws, "z"), filepath.Join(ws, "z.old")); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(dir, filepath.Join(ws, "z")); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterPackWalk = nil }()
	j := &job{box: box, ws: ws}
	blob, _, err := j.pack([]string{"z"})
	if err == nil {
		defer os.Remove(blob)
		raw, _ := exec.Command("sh", "-c", `zstd -dc "$1" | tar -xOf - z/token`, "sh", blob).Output()
		t.Fatalf("packed through the swapped directory: z/token is %q", raw)
	}
}

// TestPackBounds: what a job packs is bounded before a byte is read, as
// extraction bounds it: a sparse file of a terabyte (no disk, an hour of
// reading for the runner) is refused at once by its size, so are files
// past the total and trees past the count of entries.
func TestPackBounds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the runner's box needs root (CI runs as root)")
	}
	box, _ := packBox(t, isolate.Config{Mode: isolate.None})
	ws := box.Workspace()
	j := &job{box: box, ws: ws}
	sparse := func(name string, size int64) {
		t.Helper()
		f, err := os.Create(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	os.MkdirAll(filepath.Join(ws, "huge"), 0o755)
	sparse("huge/1T", 1<<40)
	os.MkdirAll(filepath.Join(ws, "many"), 0o755)
	for i := range 5 {
		sparse("many/"+strconv.Itoa(i), 1<<30)
	}
	os.MkdirAll(filepath.Join(ws, "wide"), 0o755)
	for i := range 60 {
		os.WriteFile(filepath.Join(ws, "wide", strconv.Itoa(i)), nil, 0o644)
	}
	saved := packLimits
	defer func() { packLimits = saved }()
	packLimits.MaxFiles = 50
	for paths, want := range map[string]string{
		"huge": "holds files of at most",
		"many": "bytes in all",
		"wide": "more than 50 entries",
	} {
		start := time.Now()
		if _, _, err := j.pack([]string{paths}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pack %s: %v, want %q", paths, err, want)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("pack %s took %v to refuse", paths, took)
		}
	}
}

// packBox is a box of one slot under cfg, its attempt in a directory of
// its own under /var/lib (on disk: /tmp may bound a file's size), all
// removed when the test ends; and that directory.
func packBox(t *testing.T, cfg isolate.Config) (*isolate.Box, string) {
	t.Helper()
	iso, err := isolate.New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iso.Close)
	dir, err := os.MkdirTemp("/var/lib", "forgeci-pack-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	box, err := iso.NewBox(0, filepath.Join(dir, "run", "job", "lease"), isolate.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	return box, dir
}
