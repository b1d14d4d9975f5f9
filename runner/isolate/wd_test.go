package isolate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkingDirectoryNotEnteredAsRoot: a step's working directory is
// entered as the slot's user, so a link an earlier step left in the
// workspace cannot take the step into a directory only root may enter
// (a link to /proc/<pid>/cwd of another job's process is the same case).
func TestWorkingDirectoryNotEnteredAsRoot(t *testing.T) {
	for _, mode := range []Mode{User, Bwrap} {
		i := newIsolator(t, mode, 1, Limits{})
		dir := workDir(t)
		secret := filepath.Join(dir, "root-only")
		if err := os.MkdirAll(filepath.Join(secret, "inner"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(secret, "inner"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(secret, "inner", "file"), []byte("ROOT-ONLY"), 0o644); err != nil {
			t.Fatal(err)
		}
		b := newBox(t, i, 0, dir)
		setup := "ln -s " + filepath.Join(secret, "inner") + " link && mkdir -p sub"
		if out, code := step(t, b, setup); code != 0 {
			t.Fatalf("%v setup: %d %s", mode, code, out)
		}
		out, err := runIn(b, "link", "cat file; pwd")
		if err == nil || strings.Contains(out, "ROOT-ONLY") {
			t.Fatalf("%v: the step read through a link into a root-only directory: %v\n%s", mode, err, out)
		}
		out, err = runIn(b, "sub", "pwd")
		if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "/ws/sub") {
			t.Fatalf("%v: working-directory sub: %v\n%s", mode, err, out)
		}
	}
}

func runIn(b *Box, dir, script string) (string, error) {
	cmd, err := b.StepCommand(Step{Script: script, Dir: dir, Env: []string{"PATH=/usr/bin:/bin", "TMPDIR=" + b.TmpDir()}})
	if err != nil {
		return "", err
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
