package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

const manualYAML = `on:
  push: {branches: [main]}
  workflow_dispatch:
    inputs:
      target: {type: choice, options: [staging, production], required: true}
      replicas: {type: number, default: "2"}
jobs:
  deploy:
    runs-on: linux
    if: github.event_name == 'workflow_dispatch'
    steps:
      - run: echo "deploying to ${{ inputs.target }} with ${{ inputs.replicas }} replicas from ${{ github.ref_name }}"
`

// testManualRun: forgeci run re-runs the newest snapshot submitted from a
// branch with typed inputs, which the control plane and the runner read;
// a bad input is refused with the pipeline's words.
func testManualRun(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		if _, err := s.submit(gitCheckout(t, manualYAML), false); err != nil {
			t.Fatal(err)
		}
		out, err := s.cli("run", "e2e", "--ref", "main", "-i", "target=production", "--follow")
		if err != nil || !strings.Contains(out, "deploying to production with 2 replicas from main") || !strings.Contains(out, "PASSED") {
			t.Fatalf("forgeci run: %v\n%s", err, out)
		}
		out, err = s.cli("run", "e2e", "--ref", "main", "-i", "target=moon")
		if err == nil || !strings.Contains(out, `input target is one of staging, production, not "moon"`) {
			t.Fatalf("a bad input: %v\n%s", err, out)
		}
	}
}

// gitCheckout is a git checkout of branch main holding the pipeline.
func gitCheckout(t *testing.T, yml string) string {
	t.Helper()
	dir := writePipeline(t, yml)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	return dir
}
