package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testArtifactsCLI: forgeci artifacts lists a run's artifacts and, with
// -o, downloads each through the presigned URL the API issues, checks its
// digest and unpacks it with the bounded extraction.
func testArtifactsCLI(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		id, err := s.submit(writePipeline(t, `jobs:
  build:
    runs-on: linux
    steps:
      - run: mkdir -p dist/docs && echo "hello from the build" > dist/hello.txt && echo manual > dist/docs/manual.txt
    artifacts: [{name: dist, paths: [dist/]}]
`), false)
		if err != nil {
			t.Fatal(err)
		}
		s.waitRun(id, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)
		cli := func(args ...string) string {
			out, err := s.cli(args...)
			if err != nil {
				t.Fatalf("forgeci %v: %v\n%s", args, err, out)
			}
			return out
		}
		if out := cli("artifacts", id); !strings.Contains(out, "build") || !strings.Contains(out, "dist") || !strings.Contains(out, "sha256:") {
			t.Fatalf("list:\n%s", out)
		}
		dir := t.TempDir()
		cli("artifacts", id, "build", "-o", dir)
		for file, want := range map[string]string{"dist/hello.txt": "hello from the build\n", "dist/docs/manual.txt": "manual\n"} {
			got, err := os.ReadFile(filepath.Join(dir, "build", "dist", file))
			if err != nil || string(got) != want {
				t.Errorf("%s: %q %v", file, got, err)
			}
		}
	}
}

// cli runs the forgeci CLI as the stack's admin and returns its output.
func (s *stack) cli(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.bin, "forgeci"), args...)
	cmd.Env = append(os.Environ(), "FORGECI_URL="+s.vals["FORGECI_URL"], "FORGECI_TOKEN="+s.vals["FORGECI_TOKEN"])
	out, err := cmd.CombinedOutput()
	return string(out), err
}
