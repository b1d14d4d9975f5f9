package isolate

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// keyringChild names the keyring tool to a run of this test in a process
// whose every thread has one session keyring.
const keyringChild = "FORGECI_TEST_KEYRING_TOOL"

// TestSessionKeyringIsNotShared: a runner's threads share the session
// keyring it started with (systemd gives a service one). A key a step
// puts in its session keyring (in bwrap, in any of its keyrings) is found
// neither by another slot's step nor by a later job's on the same slot.
func TestSessionKeyringIsNotShared(t *testing.T) {
	needRoot(t, 2)
	bin := os.Getenv(keyringChild)
	if bin == "" {
		runWithSessionKeyring(t)
		return
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 2, Limits{})
			dir := workDir(t)
			// A step's session keyring; in bwrap also the user's own and
			// its persistent keyring, which outlive their processes and
			// which a user namespace has its own of (in user mode they
			// are the slot user's, between its jobs: infra/README.md).
			rings := []string{"session"}
			if mode == Bwrap {
				rings = append(rings, "user", "persistent")
			}
			for _, ring := range rings {
				put := newBox(t, i, 0, dir)
				copyTool(t, bin, put)
				if out, code := step(t, put, "./keyring add "+ring+" forgeci-test-key s3cr3t-of-slot0 && ./keyring read "+ring+" forgeci-test-key"); code != 0 ||
					!strings.Contains(out, "value s3cr3t-of-slot0") {
					t.Fatalf("a step's own %s keyring (exit %d): %s", ring, code, out)
				}
				if err := put.Close(); err != nil {
					t.Fatal(err)
				}
				other, later := newBox(t, i, 1, dir), newBox(t, i, 0, dir)
				for name, b := range map[string]*Box{"another slot's step": other, "a later job's step": later} {
					copyTool(t, bin, b)
					if out, code := step(t, b, "./keyring read "+ring+" forgeci-test-key"); code == 0 || strings.Contains(out, "s3cr3t") {
						t.Errorf("%s read the key from its %s keyring (exit %d): %s", name, ring, code, out)
					}
				}
			}
		})
	}
}

// runWithSessionKeyring builds the keyring tool and runs the test again
// in a process started, from a thread that joined a session keyring, with
// that keyring on every thread, as a service under systemd has.
func runWithSessionKeyring(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "keyring")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/keyring").CombinedOutput(); err != nil {
		t.Fatalf("build the keyring tool: %v\n%s", err, out)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSessionKeyringIsNotShared$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), keyringChild+"="+bin)
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, with the keyring, ends with this goroutine
		if _, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 {
			done <- result{nil, errno}
			return
		}
		out, err := cmd.CombinedOutput()
		done <- result{out, err}
	}()
	r := <-done
	if r.out == nil && r.err != nil {
		t.Skipf("no keyrings here: %v", r.err)
	}
	if r.err != nil || !strings.Contains(string(r.out), "--- PASS: TestSessionKeyringIsNotShared/user") {
		t.Fatalf("in a process with a session keyring: %v\n%s", r.err, r.out)
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
