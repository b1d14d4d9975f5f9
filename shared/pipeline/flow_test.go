package pipeline_test

import (
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestFlow: a job's if:, continue-on-error, outputs and strategy are read
// as GitHub's; what the runner evaluates is kept, canonically, and marks
// the features the job needs.
func TestFlow(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`jobs:
  build:
    strategy:
      max-parallel: 2
      matrix: {go: ["1.22", "1.23"], include: [{go: "1.23", experimental: true}]}
    continue-on-error: ${{ matrix.experimental == true }}
    outputs:
      version: ${{steps.v.outputs.version}}-${{ matrix.go }}
    steps:
      - id: v
        run: echo "version=${{ github.ref_name }}" >> "$FORGECI_OUTPUT"
      - name: Show ${{ matrix.go }} ${{ secrets.TOKEN }}
        run: echo ${{ hashFiles('go.sum') }} ${{ secrets.TOKEN }}
  deploy:
    needs: [build]
    if: ${{ github.ref == 'refs/heads/main' && always() }}
    env: {V: "${{ needs.build.outputs.version }}"}
    steps: [{run: "echo $V"}]
  plain:
    strategy: {fail-fast: false, matrix: {n: [1]}}
    if: github.event_name == 'push'
    steps: [{run: "true"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	b0, b1, d, pl := p.Jobs[0], p.Jobs[1], p.Jobs[2], p.Jobs[3]
	switch {
	case b0.Group != "build" || b1.Name != "build (1.23, true)" || b0.ContinueOnError || !b1.ContinueOnError:
		t.Fatalf("matrix jobs %+v / %+v", b0, b1)
	case !b0.FailFast || b0.MaxParallel != 2 || pl.FailFast || pl.MaxParallel != 0:
		t.Fatalf("strategy %v %d / %v %d", b0.FailFast, b0.MaxParallel, pl.FailFast, pl.MaxParallel)
	case b0.Spec.Outputs["version"] != "${{ steps.v.outputs.version }}-1.22":
		t.Fatalf("outputs %q", b0.Spec.Outputs)
	case b0.Spec.Steps[0].Run != `echo "version=${{ github.ref_name }}" >> "$FORGECI_OUTPUT"`:
		t.Fatalf("run %q", b0.Spec.Steps[0].Run)
	case b0.Spec.Steps[1].Name != "Show 1.22 ***" || b0.Spec.Steps[1].Run != "echo ${{ hashFiles('go.sum') }} ${{ secrets.TOKEN }}":
		t.Fatalf("step 1 %+v", b0.Spec.Steps[1])
	case strings.Join(b0.Spec.Features(), ",") != "expressions,outputs,steps" || b0.ReadsNeeds:
		t.Fatalf("build features %v reads needs %v", b0.Spec.Features(), b0.ReadsNeeds)
	case d.If != "github.ref == 'refs/heads/main' && always()" || !d.ReadsNeeds || d.Spec.Env["V"] != "${{ needs.build.outputs.version }}":
		t.Fatalf("deploy %+v", d)
	case strings.Join(d.Spec.Features(), ",") != domain.FeatureExpressions || pl.If != "github.event_name == 'push'" || len(pl.Spec.Features()) != 0:
		t.Fatalf("deploy features %v, plain %+v", d.Spec.Features(), pl)
	}
	refuses(t, "jobs:\n  a:\n    steps: [{run: x}]\n  b:\n    needs: a\n    %s\n    steps: [{id: s, run: x}]\n", map[string]string{
		"if: needs.c.result == 'success'":               `needs.c: job "c" is not in this job's needs`,
		"if: steps.s.outcome == 'success'":              `context "steps" is not available here`,
		"if: hashFiles('x') != ''":                      "a job's if: cannot call it",
		"if: github.event.pull_request":                 "github.event is not available",
		"env: {X: '${{ steps.s.outputs.x }}'}":          `context "steps" is not available here`,
		"env: {X: '${{ hashFiles(''x'') }}'}":           "hashFiles is evaluated in a job's steps",
		"outputs: {x: '${{ steps.t.outputs.x }}'}":      `steps.t: no step before this one has id "t"`,
		"outputs: {1x: y}":                              `output name "1x" must start with a letter`,
		"continue-on-error: maybe":                      "must be true or false",
		"runs-on: ['${{ steps.x.outputs.y }}']":         "can be read here",
		"env: {X: '${{ format(''{0}'', secrets.A) }}'}": "a secret is used alone",
	})
	refuses(t, "jobs:\n  a:\n    steps:\n      - run: echo ${{ steps.later.outputs.x }}\n      - {id: later, run: x}\n%s", map[string]string{
		"": `steps.later: no step before this one has id "later"`,
	})
}

// TestSecretsAsLiterals: in a job whose runner evaluates expressions, a
// secret goes in as a string literal: evaluating the script gives back
// the value as it is, whatever it holds, and nothing in it is evaluated.
func TestSecretsAsLiterals(t *testing.T) {
	p, err := pipeline.Parse("p.yml", []byte("jobs:\n  a:\n    steps:\n      - run: \"x ${{ secrets.A }}${{ github.ref_name }} ${{ secrets.B }}\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"plain", "it's", "${{ github.ref }}", "}} ${{ 'x' }}", "$", "'", "a''b", "${{", "\n}}\n",
		strings.Repeat("'", 40000), strings.Repeat("é", 50000)} {
		spec := p.Jobs[0].Spec
		spec.Steps = append([]domain.Step{}, spec.Steps...)
		spec.ExpandSecrets(map[string]string{"A": v, "B": v + "{{"}, true)
		tpl, errs := expr.ParseTemplate(spec.Steps[0].Run)
		if len(errs) > 0 {
			t.Fatalf("value %q: %q does not parse: %v", v, spec.Steps[0].Run, errs[0])
		}
		got, err := tpl.Eval(&expr.Context{Vars: map[string]any{"github": map[string]any{"ref_name": "main"}}})
		if want := "x " + v + "main " + v + "{{"; err != nil || got != want {
			t.Fatalf("value %q: got %q, %v; want %q", v, got, err, want)
		}
	}
}

// TestParsedValuesNotEvaluatedTwice: a value the parser computed (a
// literal, a matrix value) that holds ${{ reaches the runner as a
// literal: the runner puts it back as it is.
func TestParsedValuesNotEvaluatedTwice(t *testing.T) {
	p, err := pipeline.Parse("p.yml", []byte(`jobs:
  a:
    strategy: {matrix: {v: ["${{ github.ref }}"]}}
    steps:
      - run: "echo ${{ '${{ github.ref }}' }} ${{ matrix.v }} ${{ github.ref_name }}"
`))
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Jobs[0].Spec
	c := &expr.Context{Vars: map[string]any{"github": map[string]any{"ref": "refs/heads/main", "ref_name": "main"}}}
	for _, tc := range []struct{ text, want string }{
		{spec.Steps[0].Run, "echo ${{ github.ref }} ${{ github.ref }} main"},
		{spec.Env["FORGECI_MATRIX_V"], "${{ github.ref }}"},
	} {
		tpl, errs := expr.ParseTemplate(tc.text)
		if len(errs) > 0 {
			t.Fatalf("%q: %v", tc.text, errs[0])
		}
		if got, err := tpl.Eval(c); err != nil || got != tc.want {
			t.Errorf("%q evaluates to %q, %v; want %q", tc.text, got, err, tc.want)
		}
	}
}

// TestDefaultsPermissionsName: defaults.run (the file's, then the job's)
// gives steps their shell and directory; permissions are checked and
// accepted (a job gets no GitHub token), id-token: write refused; a job's
// name is its display name.
func TestDefaultsPermissionsName(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`permissions: {contents: read, pull-requests: write}
defaults: {run: {shell: sh, working-directory: src}}
jobs:
  a:
    name: Build ${{ matrix.os }}
    strategy: {matrix: {os: [linux]}}
    permissions: read-all
    defaults: {run: {working-directory: app}}
    steps:
      - run: x
      - {run: y, shell: bash, working-directory: .}
  b:
    steps: [{run: z}]
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.Jobs[0].Spec, p.Jobs[1].Spec
	switch {
	case a.DisplayName != "Build linux":
		t.Fatalf("name %q", a.DisplayName)
	case strings.Join(a.Steps[0].Shell, " ") != "sh -e {0}" || a.Steps[0].WorkingDirectory != "app":
		t.Fatalf("a step 0 %+v", a.Steps[0])
	case a.Steps[1].Shell[0] != "bash" || a.Steps[1].WorkingDirectory != ".":
		t.Fatalf("a step 1 %+v", a.Steps[1])
	case b.Steps[0].WorkingDirectory != "src" || strings.Join(b.Steps[0].Shell, " ") != "sh -e {0}":
		t.Fatalf("b step %+v", b.Steps[0])
	}
	refuses(t, "jobs:\n  a:\n    %s\n    steps: [{run: x}]\n", map[string]string{
		"permissions: {id-token: read}":            "is write or none",
		"permissions: {content: read}":             `unknown permission "content"`,
		"permissions: {contents: admin}":           "is read, write or none",
		"permissions: all":                         "read-all, write-all or a mapping",
		"defaults: {run: {shell: zsh}}":            "shell is bash, sh, python",
		"defaults: {run: {working-directory: /x}}": "must be a relative path inside the workspace",
		"defaults: {shell: sh}":                    `unknown key "shell" (expected run)`,
	})
}
