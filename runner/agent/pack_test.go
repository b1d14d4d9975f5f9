package agent

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
	iso, err := isolate.New(isolate.Config{Mode: isolate.User, SlotUsers: []string{slotUser}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer iso.Close()
	dir, err := os.MkdirTemp("/var/lib", "forgeci-pack-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	box, err := iso.NewBox(0, filepath.Join(dir, "run", "job", "lease"), isolate.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
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
