package isolate

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestShareReachesTheJobOnly: a socket the runner shares with a job (its
// identity-token socket: the job's user's, mode 0600, in a directory of
// the runner's) is reachable by the job's steps at the same path in user
// and bwrap modes, not by another slot's steps; and the runner's copy
// (Executable) runs as the job's user.
func TestShareReachesTheJobOnly(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 2, Limits{})
			dir := workDir(t)
			mine, other := newBox(t, i, 0, dir), newBox(t, i, 1, dir)
			if err := mkdirMode(filepath.Join(dir, "id-token"), 0o711); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "id-token", "0-lease.sock")
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprint(w, "hello from the runner")
			})}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			// As the runner makes it: root's, the slot user's group, 0660,
			// so the step can connect and not chmod it open.
			if err := os.Chmod(path, 0o660); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, 0, mine.OwnerGroup()); err != nil {
				t.Fatal(err)
			}
			mine.Share(path)
			other.Share(path)
			ask := "curl -sS --max-time 5 --unix-socket " + path + " http://localhost/"
			if out, code := step(t, mine, ask); code != 0 || !strings.Contains(out, "hello from the runner") {
				t.Fatalf("the job's step could not reach its socket (exit %d):\n%s", code, out)
			}
			if out, code := step(t, other, ask); code == 0 || strings.Contains(out, "hello") {
				t.Fatalf("another slot's step reached the socket (exit %d):\n%s", code, out)
			}
			if out, code := step(t, mine, "chmod 666 "+path); code == 0 {
				t.Fatalf("the job's step opened its socket to others:\n%s", out)
			}
			exe, err := mine.Executable()
			if err != nil {
				t.Fatal(err)
			}
			// The copy is this test binary: asked to run no test, it says PASS.
			if out, code := step(t, mine, `"`+exe+`" -test.run='^$' && id -u`); code != 0 || !strings.Contains(out, "PASS") ||
				!strings.Contains(out, fmt.Sprint(mine.Owner())) {
				t.Fatalf("the runner's copy did not run as the job's user (exit %d):\n%s", code, out)
			}
		})
	}
}
