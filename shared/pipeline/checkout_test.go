package pipeline_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestCheckoutStep: a GitHub workflow's `uses: actions/checkout@REF`
// (any version, the name in any case) is taken, with the inputs that
// change nothing when nothing is fetched, as a step that says so: the
// workspace is the run's snapshot already. Its id, if, env and name are
// kept; the file's defaults for run steps do not apply to it.
func TestCheckoutStep(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`defaults:
  run: {shell: python, working-directory: build}
jobs:
  a:
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 1
          fetch-tags: false
          persist-credentials: false
          submodules: false
          lfs: "false"
          filter: blob:none
          ssh-strict:
          token: ${{ secrets.PAT }}
      - name: Get the code
        id: co
        if: github.event_name == 'push'
        uses: Actions/Checkout@8e5e7e5ab8b370d6c329ec480221332ada57f0ab
      - run: print("${{ steps.co.outputs.commit }}")
`))
	if err != nil {
		t.Fatal(err)
	}
	steps := p.Jobs[0].Spec.Steps
	if len(steps) != 3 {
		t.Fatalf("steps %+v", steps)
	}
	s0, s1, s2 := steps[0], steps[1], steps[2]
	switch {
	case s0.Name != "actions/checkout" || !strings.Contains(s0.Run, "nothing to fetch") || s0.Shell != nil || s0.WorkingDirectory != "":
		t.Fatalf("step 0: %+v", s0)
	case s1.Name != "Get the code" || s1.ID != "co" || s1.If != "github.event_name == 'push'" || s1.Run != s0.Run || s1.Shell != nil:
		t.Fatalf("step 1: %+v", s1)
	case strings.Join(s2.Shell, " ") != "python3 {0}" || s2.WorkingDirectory != "build":
		t.Fatalf("step 2 lost the defaults: %+v", s2)
	}
	if strings.Contains(s0.Run, "PAT") || len(s0.Env) != 0 || len(p.Jobs[0].Spec.Secrets) != 0 {
		t.Fatalf("the unread token reached the job: %+v", p.Jobs[0].Spec)
	}
}

// TestCheckoutOutputs: the checkout step's script gives GitHub's outputs,
// commit and ref, from the run's facts the runner sets, and runs where
// the runner gives no output file (a step without an id on an older
// runner).
func TestCheckoutOutputs(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    steps: [{id: co, uses: actions/checkout@v4}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	script := p.Jobs[0].Spec.Steps[0].Run
	out := filepath.Join(t.TempDir(), "output")
	cmd := exec.Command("bash", "-e", "-c", script)
	cmd.Env = []string{"FORGECI_OUTPUT=" + out, "FORGECI_SHA=0123abcd", "FORGECI_REF=refs/heads/it's"}
	if msg, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(msg), "nothing to fetch") {
		t.Fatalf("%v: %s", err, msg)
	}
	if got, _ := os.ReadFile(out); string(got) != "commit=0123abcd\nref=refs/heads/it's\n" {
		t.Fatalf("outputs %q", got)
	}
	cmd = exec.Command("bash", "-e", "-c", script)
	cmd.Env = []string{"FORGECI_SHA=0123abcd"}
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("without an output file: %v: %s", err, msg)
	}
}

// TestCheckoutRefusals: a checkout of anything but the run's snapshot, an
// action other than checkout, and keys out of place are refused, located.
func TestCheckoutRefusals(t *testing.T) {
	refuses(t, "jobs:\n  a:\n    steps:\n      - %s\n", map[string]string{
		"{uses: actions/setup-go@v5}":                                "uses (actions) is not supported, except actions/checkout",
		"{uses: evil/actions/checkout@v4}":                           "uses (actions) is not supported, except actions/checkout",
		"{uses: ./.github/actions/checkout}":                         "uses (actions) is not supported, except actions/checkout",
		"{uses: \"actionſ/checkout@v4\"}":                            "uses (actions) is not supported, except actions/checkout",
		"{uses: actions/checkout}":                                   "actions/checkout needs a version",
		"{uses: actions/checkout@}":                                  "actions/checkout needs a version",
		"{uses: 'actions/checkout@ v4'}":                             "actions/checkout needs a version",
		"{uses: 'actions/checkout@${{ matrix.v }}'}":                 "actions/checkout needs a version",
		"{uses: actions/checkout@v4, run: ls}":                       "a step has run or uses, not both",
		"{uses: actions/checkout@v4, with: {repository: o/r}}":       "steps[0].with.repository: actions/checkout with repository is not supported",
		"{uses: actions/checkout@v4, with: {ref: main}}":             "actions/checkout with ref is not supported",
		"{uses: actions/checkout@v4, with: {path: src}}":             "actions/checkout with path is not supported",
		"{uses: actions/checkout@v4, with: {sparse-checkout: a}}":    "actions/checkout with sparse-checkout is not supported",
		"{uses: actions/checkout@v4, with: {submodules: true}}":      "actions/checkout with submodules is not supported",
		"{uses: actions/checkout@v4, with: {submodules: recursive}}": "actions/checkout with submodules is not supported",
		"{uses: actions/checkout@v4, with: {lfs: true}}":             "actions/checkout with lfs is not supported",
		"{uses: actions/checkout@v4, with: {fetch-depth: 0}}":        "actions/checkout with fetch-depth 0 is not supported: the workspace holds no .git",
		"{uses: actions/checkout@v4, with: {fetch-tags: true}}":      "actions/checkout with fetch-tags is not supported",
		"{uses: actions/checkout@v4, with: {token: [a]}}":            "steps[0].with.token: must be a string, not a list",
		"{uses: actions/checkout@v4, with: {clean: '${{ foo( }}'}}":  "steps[0].with.clean: expression",
		"{uses: actions/checkout@v4, with: [fetch-depth]}":           "steps[0].with: must be a mapping",
		"{uses: actions/checkout@v4, shell: bash}":                   "steps[0].shell: shell is for a run step",
		"{uses: actions/checkout@v4, working-directory: x}":          "working-directory is for a run step",
		"{run: ls, with: {fetch-depth: 1}}":                          "steps[0].with: with is for a uses step",
	})
}
