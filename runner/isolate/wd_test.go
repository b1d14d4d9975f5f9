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

// TestStepFilesAreTheStepsOnly: a step may write the files it is given
// (its outputs, environment and path files), inside the sandbox too, and
// make nothing new in the steps directory (in the sandbox it may write no
// other file there; without it, the job's earlier steps' files are its
// user's); what it wrote is read back, and a file replaced by a link is
// refused.
func TestStepFilesAreTheStepsOnly(t *testing.T) {
	for _, mode := range []Mode{User, Bwrap} {
		i := newIsolator(t, mode, 1, Limits{})
		b := newBox(t, i, 0, workDir(t))
		var files []string
		for _, kind := range []string{"output", "env", "path"} {
			f, err := b.NewStepFile(kind)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		other, err := b.NewStepFile("output")
		if err != nil {
			t.Fatal(err)
		}
		script := `for f in "$A" "$B" "$C"; do echo "wrote $f" >> "$f"; done
echo x >> "$D" 2>/dev/null && echo "WROTE OTHER"
touch "$(dirname "$A")/new" 2>/dev/null && echo "MADE NEW"
exit 0`
		cmd, err := b.StepCommand(Step{Script: script, Files: files, Env: []string{"PATH=/usr/bin:/bin",
			"A=" + files[0], "B=" + files[1], "C=" + files[2], "D=" + other}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || (mode == Bwrap && strings.Contains(string(out), "WROTE OTHER")) || strings.Contains(string(out), "MADE NEW") {
			t.Fatalf("%v: %v\n%s", mode, err, out)
		}
		for _, f := range files {
			if got, err := b.ReadStepFile(f, "X"); err != nil || string(got) != "wrote "+f+"\n" {
				t.Fatalf("%v: %s: %q %v", mode, f, got, err)
			}
		}
		if got, err := b.ReadStepFile(other, "X"); mode == Bwrap && (err != nil || len(got) != 0) {
			t.Fatalf("%v: a file not given to the step: %q %v", mode, got, err)
		}
		if err := os.Remove(files[1]); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc/passwd", files[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ReadStepFile(files[1], "FORGECI_ENV"); err == nil {
			t.Fatalf("%v: a link in place of a step's file was read", mode)
		}
	}
}
