package pipeline_test

import (
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestStepKeys: id, if (with or without ${{ }}), shell, working-directory
// and continue-on-error reach the job's spec, and the job needs the steps
// feature; a job without them needs none.
func TestStepKeys(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`jobs:
  a:
    steps:
      - id: v
        run: echo x
        shell: sh
        working-directory: ./sub/../dir
        continue-on-error: true
      - if: ${{ steps.v.outputs.x == 'y' }}
        run: echo y
        shell: perl {0}
      - if: failure() || env.X
        run: echo z
  b:
    steps: [{run: "true"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.Jobs[0].Spec, p.Jobs[1].Spec
	s0, s1, s2 := a.Steps[0], a.Steps[1], a.Steps[2]
	switch {
	case s0.ID != "v" || strings.Join(s0.Shell, " ") != "sh -e {0}" || s0.WorkingDirectory != "dir" || !s0.ContinueOnError:
		t.Fatalf("step 0: %+v", s0)
	case s1.If != "steps.v.outputs.x == 'y'" || strings.Join(s1.Shell, " ") != "perl {0}":
		t.Fatalf("step 1: %+v", s1)
	case s2.If != "failure() || env.X":
		t.Fatalf("step 2: %+v", s2)
	case strings.Join(a.Features(), ",") != domain.FeatureSteps || len(b.Features()) != 0:
		t.Fatalf("features %v and %v", a.Features(), b.Features())
	}
	refuses(t, "jobs:\n  a:\n    steps:\n      - %s\n", map[string]string{
		"{id: 1x, run: a}":                    "a step id starts with a letter",
		"{run: a, shell: zsh}":                "shell is bash, sh, python",
		"{run: a, working-directory: ../out}": "must be a relative path inside the workspace",
		"{run: a, working-directory: /etc}":   "must be a relative path inside the workspace",
		"{run: a, if: needs.b.result == 'x'}": `needs.b: job "b" is not in this job's needs`,
		"{run: a, if: nope.X}":                `context "nope" is not available here`,
		"{run: a, if: github.token}":          `github.token is not available`,
		"{run: a, if: 'x ${{ true }}'}":       "an if: is one expression",
		"{run: a, if: nope()}":                "unknown function nope()",
		"{run: a, continue-on-error: 'yes'}":  "must be true or false",
		"{run: a, uses: actions/checkout@v4}": "a step has run or uses, not both",
	})
	_, err = pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    steps:\n      - {id: x, run: a}\n      - {id: x, run: b}\n"))
	if err == nil || !strings.Contains(err.Error(), `step id "x" is used twice`) {
		t.Fatalf("duplicate id: %v", err)
	}
}
