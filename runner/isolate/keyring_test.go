package isolate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSessionKeyringIsNotShared: every step inherits the runner's session
// keyring (systemd gives a service one of its own; so does this test). A
// key a step puts there is found neither by another slot's step nor by a
// later job's on the same slot.
func TestSessionKeyringIsNotShared(t *testing.T) {
	needRoot(t, 2)
	if _, err := unix.KeyctlJoinSessionKeyring("forgeci-test-runner"); err != nil {
		t.Skipf("no keyrings here: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "keyring")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/keyring").CombinedOutput(); err != nil {
		t.Fatalf("build the keyring tool: %v\n%s", err, out)
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 2, Limits{})
			dir := workDir(t)
			put, other, later := newBox(t, i, 0, dir), newBox(t, i, 1, dir), newBox(t, i, 0, dir)
			for _, b := range []*Box{put, other, later} {
				copyTool(t, bin, b)
			}
			step(t, put, "./keyring add forgeci-test-key s3cr3t-of-slot0")
			for name, b := range map[string]*Box{"another slot's step": other, "a later job's step": later} {
				if out, code := step(t, b, "./keyring read forgeci-test-key"); code == 0 || strings.Contains(out, "s3cr3t") {
					t.Errorf("%s read the key (exit %d): %s", name, code, out)
				}
			}
		})
	}
}

// copyTool puts the tool at bin into b's workspace, where bwrap's steps see
// it too.
func copyTool(t *testing.T, bin string, b *Box) {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.Workspace(), "keyring"), data, 0o755); err != nil {
		t.Fatal(err)
	}
}
