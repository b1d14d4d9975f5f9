package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// checkoutPipeline keeps a GitHub workflow's actions/checkout step and
// reads its outputs, as workflows tagging an image by commit do.
const checkoutPipeline = `jobs:
  build:
    runs-on: linux
    defaults: {run: {shell: sh, working-directory: made-later}}
    steps:
      - id: checkout
        uses: actions/checkout@v4
        with: {fetch-depth: 1, persist-credentials: false}
      - working-directory: .
        run: |
          echo "commit ${{ steps.checkout.outputs.commit }} ref ${{ steps.checkout.outputs.ref }}"
          test "${{ steps.checkout.outputs.commit }}" = "$GITHUB_SHA" && test "${{ steps.checkout.outputs.ref }}" = "$GITHUB_REF"
`

// testCheckout: a run of a git checkout on main with an actions/checkout
// step passes; the step says there is nothing to fetch and gives the
// run's commit and ref as its outputs; the job's defaults for run steps
// (a directory no step has made yet) do not apply to it.
func testCheckout(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		dir := gitPipeline(t, checkoutPipeline, "main")
		head, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.submit(dir, false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "PASSED" || v.State == "FAILED" }, 60*time.Second)
		log := s.log(id, v.Jobs[0].ID)
		if v.State != "PASSED" {
			t.Fatalf("run %s; log:\n%s", v.State, log)
		}
		want := "commit " + strings.TrimSpace(string(head)) + " ref refs/heads/main"
		if !strings.Contains(log, "actions/checkout: nothing to fetch") || !strings.Contains(log, want) {
			t.Fatalf("log lacks the checkout's note or %q:\n%s", want, log)
		}
	}
}
