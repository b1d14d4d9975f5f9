package pipeline_test

import (
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestCheckoutStep: a GitHub workflow's `uses: actions/checkout@REF`
// (any version, any case) is taken, with the inputs that change nothing
// when nothing is fetched, as a step that says so: the workspace is the
// run's snapshot already. Its id, if, env and name are kept.
func TestCheckoutStep(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`jobs:
  a:
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0
          persist-credentials: false
          submodules: false
          lfs: "false"
          token: ${{ secrets.PAT }}
      - name: Get the code
        id: co
        if: github.event_name == 'push'
        uses: Actions/Checkout@8e5e7e5ab8b370d6c329ec480221332ada57f0ab
      - run: make test
`))
	if err != nil {
		t.Fatal(err)
	}
	steps := p.Jobs[0].Spec.Steps
	if len(steps) != 3 {
		t.Fatalf("steps %+v", steps)
	}
	s0, s1 := steps[0], steps[1]
	switch {
	case s0.Name != "actions/checkout" || !strings.Contains(s0.Run, "nothing to fetch") || !strings.HasPrefix(s0.Run, "echo "):
		t.Fatalf("step 0: %+v", s0)
	case s1.Name != "Get the code" || s1.ID != "co" || s1.If != "github.event_name == 'push'" || s1.Run != s0.Run:
		t.Fatalf("step 1: %+v", s1)
	case steps[2].Run != "make test":
		t.Fatalf("step 2: %+v", steps[2])
	}
	if strings.Contains(s0.Run, "PAT") || len(s0.Env) != 0 {
		t.Fatalf("the ignored token reached the step: %+v", s0)
	}
}

// TestCheckoutRefusals: a checkout of anything but the run's snapshot, an
// action other than checkout, and keys out of place are refused, located.
func TestCheckoutRefusals(t *testing.T) {
	refuses(t, "jobs:\n  a:\n    steps:\n      - %s\n", map[string]string{
		"{uses: actions/setup-go@v5}":                                "uses (actions) is not supported but for actions/checkout",
		"{uses: actions/checkout}":                                   "uses (actions) is not supported but for actions/checkout",
		"{uses: evil/actions/checkout@v4}":                           "uses (actions) is not supported but for actions/checkout",
		"{uses: ./.github/actions/checkout}":                         "uses (actions) is not supported but for actions/checkout",
		"{uses: actions/checkout@v4, run: ls}":                       "a step has run or uses, not both",
		"{uses: actions/checkout@v4, with: {repository: o/r}}":       "steps[0].with.repository: actions/checkout with repository is not supported",
		"{uses: actions/checkout@v4, with: {ref: main}}":             "actions/checkout with ref is not supported",
		"{uses: actions/checkout@v4, with: {path: src}}":             "actions/checkout with path is not supported",
		"{uses: actions/checkout@v4, with: {sparse-checkout: a}}":    "actions/checkout with sparse-checkout is not supported",
		"{uses: actions/checkout@v4, with: {submodules: true}}":      "actions/checkout with submodules is not supported",
		"{uses: actions/checkout@v4, with: {submodules: recursive}}": "actions/checkout with submodules is not supported",
		"{uses: actions/checkout@v4, with: {lfs: true}}":             "actions/checkout with lfs is not supported",
		"{uses: actions/checkout@v4, with: [fetch-depth]}":           "with",
		"{uses: actions/checkout@v4, shell: bash}":                   "steps[0].shell: shell is for a run step",
		"{uses: actions/checkout@v4, working-directory: x}":          "working-directory is for a run step",
		"{run: ls, with: {fetch-depth: 0}}":                          "steps[0].with: with is for a uses step",
	})
}
