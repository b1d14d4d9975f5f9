package pipeline_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestStrategyContext: strategy.job-index, job-total, fail-fast and
// max-parallel are filled in when each combination's job is made, as
// GitHub's (a job without a matrix is index 0 of 1); an expression that
// reads strategy with a context the runner fills in is refused, located.
func TestStrategyContext(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`jobs:
  test:
    strategy: {matrix: {shard: [a, b, c]}, max-parallel: 2}
    env: {SHARD: '${{ strategy.job-index }}/${{ strategy.job-total }}'}
    steps: [{run: 'echo ${{ strategy.fail-fast }} ${{ strategy.max-parallel }} ${{ matrix.shard }}-${{ strategy.job-index }}'}]
  one:
    strategy: {fail-fast: false}
    steps: [{run: 'echo ${{ strategy.job-index }}/${{ strategy.job-total }} ${{ strategy.fail-fast }} ${{ strategy.max-parallel }}'}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range p.Jobs {
		got = append(got, j.Name+" "+j.Spec.Env["SHARD"]+" "+j.Spec.Steps[0].Run)
	}
	want := []string{"test (a) 0/3 echo true 2 a-0", "test (b) 1/3 echo true 2 b-1", "test (c) 2/3 echo true 2 c-2", "one  echo 0/1 false 1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("jobs\n%q\nwant\n%q", got, want)
	}
	if _, err := pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    steps: [{run: 'echo ${{ strategy.job-index }}-${{ github.sha }}'}]\n")); err != nil {
		t.Fatalf("strategy beside a runner's context, each in its own ${{ }}: %v", err)
	}
	refuses(t, "jobs:\n  a:\n    strategy: {matrix: {x: [1]}}\n    steps: [{run: '%s'}]\n", map[string]string{
		"echo ${{ strategy.job-index == 0 && github.sha }}": "strategy is filled in when the job is made",
		"echo ${{ strategy.job-count }}":                    `strategy has no property "job-count"`,
	})
}

// TestJobStatusContext: a step reads job.status (the runner fills it in,
// so the job needs the job-status feature); the job context has nothing
// else.
func TestJobStatusContext(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    steps:\n      - run: make\n      - if: always() && job.status == 'failure'\n        run: 'echo ${{ job.status }}'\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f := p.Jobs[0].Spec.Features(); !slices.Contains(f, domain.FeatureJobStatus) {
		t.Fatalf("features %v", f)
	}
	refuses(t, "jobs:\n  a:\n    steps: [{run: '%s'}]\n", map[string]string{
		"echo ${{ job.container }}": "job.container: the job context has status only",
	})
	refuses(t, "jobs:\n  a:\n    if: %s\n    steps: [{run: make}]\n", map[string]string{
		"job.status == 'success'": `context "job" is not available here`,
	})
}

// TestRunNameParse: run-name is text or a template over forgeci, github
// and inputs, evaluated when the run is made; other contexts are refused,
// located.
func TestRunNameParse(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte("run-name: Deploy ${{ inputs.env }} by ${{ github.actor }}\njobs:\n  a: {steps: [{run: x}]}\n"))
	if err != nil || p.RunName != "Deploy ${{ inputs.env }} by ${{ github.actor }}" {
		t.Fatalf("run-name %q: %v", p.RunName, err)
	}
	refuses(t, "run-name: %s\njobs:\n  a: {steps: [{run: x}]}\n", map[string]string{
		"${{ matrix.x }}":          `f.yml:1:11: run-name: ${{ matrix.x }}: context "matrix" is not available here`,
		"${{ secrets.TOKEN }}":     `context "secrets" is not available here`,
		"${{ github.event.name }}": "github.event is not available",
		"[a, b]":                   "run-name",
		strings.Repeat("x", 801):   "over the limit of 800",
	})
}

// TestAddMaskFeature: a job whose script names add-mask needs a runner
// that acts on it: on one that does not, the value would be printed.
func TestAddMaskFeature(t *testing.T) {
	for script, want := range map[string]bool{`echo "::add-mask::$TOKEN"`: true, `echo hello`: false} {
		p, err := pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    steps: [{run: '"+script+"'}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(p.Jobs[0].Spec.Features(), domain.FeatureAddMask); got != want {
			t.Errorf("%s: needs add-mask %v", script, got)
		}
	}
}

// TestVarsContext: vars (the project's variables, as the run was made)
// may be read wherever the run's facts may; the runner's strings that read
// it need the vars feature; runs-on cannot (it is decided before).
func TestVarsContext(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`run-name: 'to ${{ vars.REGION }}'
concurrency: deploy-${{ vars.REGION }}
jobs:
  a:
    if: vars.DEPLOY == 'yes'
    env: {R: '${{ vars.REGION }}'}
    steps:
      - if: vars.REGION != ''
        run: 'echo ${{ vars.REGION }}'
  b:
    steps: [{run: make}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range p.Jobs {
		if got := slices.Contains(j.Spec.Features(), domain.FeatureVars); got != (j.Name == "a") {
			t.Errorf("job %s needs vars %v", j.Name, got)
		}
	}
	// runs-on is evaluated when the run is made: vars and the run's facts
	// are kept for it, a matrix value is filled in now (as a literal if it
	// holds ${{), a runner's context is refused.
	p, err = pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    strategy: {matrix: {x: ['${{ evil }}']}}\n    runs-on: ['${{ vars.RUNNER || ''linux'' }}', '${{ matrix.x }}']\n    steps: [{run: x}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Jobs[0].Labels; len(got) != 2 || got[0] != "${{ vars.RUNNER || 'linux' }}" || got[1] != "${{ '${{ evil }}' }}" {
		t.Fatalf("labels %q", got)
	}
	refuses(t, "jobs:\n  a:\n    runs-on: %s\n    steps: [{run: x}]\n", map[string]string{
		"'${{ env.LABEL }}'":        "only forgeci, github, inputs, vars, matrix can be read here",
		"'${{ secrets.LABEL }}'":    "secrets may be used only in env values and run scripts",
		"'${{ github.event.x }}'":   "github.event is not available",
		"'${{ hashFiles(''x'') }}'": "only forgeci, github, inputs, vars, matrix can be read here",
	})
}

// TestContextFeaturesReadExpressions: whether a job needs the vars or
// job-status feature is read from its expressions, whatever their case
// or form, not from a script's own text.
func TestContextFeaturesReadExpressions(t *testing.T) {
	for run, want := range map[string][]string{
		"echo ${{ VARS.REGION }}":                      {domain.FeatureVars},
		"echo ${{ vars['REGION'] }}":                   {domain.FeatureVars},
		"echo ${{ toJSON(vars) }}":                     {domain.FeatureVars},
		"ansible-playbook -e @group_vars.yml site.yml": nil,
		"echo ${{ Job.Status }}":                       {domain.FeatureJobStatus},
		"curl $API/job.status":                         nil,
		"echo ${{ github.job }}":                       nil,
	} {
		p, err := pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    steps: [{run: \""+run+"\"}]\n"))
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		f := p.Jobs[0].Spec.Features()
		for _, feat := range []string{domain.FeatureVars, domain.FeatureJobStatus} {
			if slices.Contains(f, feat) != slices.Contains(want, feat) {
				t.Errorf("%s: features %v", run, f)
			}
		}
	}
}
