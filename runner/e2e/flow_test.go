package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// flowPipeline exercises what the control plane and a runner declaring the
// expressions and outputs features do together: a job output read by a
// dependant's if:, env and script; a condition that skips; a failure()
// job after a failed need and the plain dependant it skips; a job that
// fails with continue-on-error; expressions of every runner context in a
// script; hashFiles over the snapshot; fail-fast in a matrix.
const flowPipeline = `jobs:
  build:
    name: Build for ${{ github.event_name }}
    runs-on: linux
    outputs:
      version: ${{ steps.v.outputs.version }}
      where: ${{ runner.os }}/${{ github.event_name }}
    steps:
      - id: v
        run: echo "version=2.0.${{ github.run_number }}" >> "$FORGECI_OUTPUT"
      - name: hash ${{ hashFiles('.forgeci.yml') }}
        run: echo "files ${{ hashFiles('**/*.yml', '!nothing') }} none[${{ hashFiles('*.none') }}] ${{ steps.v.outputs.version }}"
  deploy:
    runs-on: linux
    needs: build
    if: needs.build.outputs.version != '' && needs.build.result == 'success'
    env: {VERSION: "${{ needs.build.outputs.version }}"}
    steps:
      - env: {WHERE: "${{ needs.build.outputs.where }}"}
        run: echo "deploying $VERSION from $WHERE as ${{ github.job }} ${{ env.VERSION }}"
  never:
    runs-on: linux
    needs: build
    if: needs.build.outputs.version == 'nope'
    steps: [{run: echo never}]
  broken:
    runs-on: linux
    steps: [{run: exit 3}]
  notify:
    runs-on: linux
    needs: broken
    if: failure()
    steps: [{run: "echo notifying about ${{ needs.broken.result }}"}]
  plain-dependant:
    runs-on: linux
    needs: broken
    steps: [{run: echo no}]
  tolerated:
    runs-on: linux
    continue-on-error: true
    steps: [{run: exit 5}]
  after-tolerated:
    runs-on: linux
    needs: tolerated
    steps: [{run: "echo after tolerated ${{ needs.tolerated.result }}"}]
  fast:
    runs-on: linux
    strategy: {matrix: {n: [1, 2]}}
    steps: [{run: "if [ ${{ matrix.n }} = 1 ]; then exit 1; fi; sleep 120"}]
`

func testFlow(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		id, err := s.submit(writePipeline(t, flowPipeline), false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "FAILED" }, 90*time.Second)
		want := map[string]string{"build": "PASSED", "deploy": "PASSED", "never": "SKIPPED", "broken": "FAILED",
			"notify": "PASSED", "plain-dependant": "SKIPPED", "tolerated": "FAILED", "after-tolerated": "PASSED",
			"fast (1)": "FAILED", "fast (2)": "CANCELED"}
		ids := map[string]string{}
		for _, j := range v.Jobs {
			ids[j.Name] = j.ID
			if want[j.Name] != j.State {
				t.Errorf("%s: %s (%s), want %s", j.Name, j.State, j.Reason, want[j.Name])
			}
			if j.Name == "never" && j.Reason != "if: needs.build.outputs.version == 'nope' was false" {
				t.Errorf("never: reason %q", j.Reason)
			}
		}
		logs := map[string][]string{
			"build":  {"==> step 2/2: hash ", "none[] 2.0.", "job outputs set: version, where"},
			"deploy": {"deploying 2.0.", "from Linux/submit as deploy 2.0."},
			"notify": {"notifying about failure"}, "after-tolerated": {"after tolerated success"},
		}
		for name, wants := range logs {
			log := s.log(id, ids[name])
			for _, w := range wants {
				if !strings.Contains(log, w) {
					t.Errorf("%s log lacks %q:\n%s", name, w, log)
				}
			}
		}
		build := s.log(id, ids["build"])
		if m := regexp.MustCompile(`files ([0-9a-f]{64}) `).FindStringSubmatch(build); m == nil || !strings.Contains(build, "hash "+m[1]) {
			t.Errorf("hashFiles of the one .yml file differs between patterns or is not a SHA-256:\n%s", build)
		}
	}
}
