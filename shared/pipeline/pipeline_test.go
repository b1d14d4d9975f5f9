package pipeline_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/goccy/go-yaml/lexer"

	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/pipeline/pipelinetest"
)

func TestExample(t *testing.T) {
	src, err := os.ReadFile("testdata/example.yml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.Parse(".forgeci.yml", src)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]pipeline.Job{}
	var names []string
	for _, j := range p.Jobs {
		byName[j.Name] = j
		names = append(names, j.Name)
	}
	if got := strings.Join(names, "|"); got != "lint|test (1.22, debian)|test (1.23, debian)|package|publish" {
		t.Fatalf("jobs %s", got)
	}
	tj := byName["test (1.23, debian)"]
	if tj.Spec.Steps[0].Name != "Test on debian" || tj.Spec.Steps[0].Run != `echo "$GREETING 1.23"` {
		t.Fatalf("matrix substitution: %+v", tj.Spec.Steps[0])
	}
	if tj.Spec.Env["GREETING"] != "hello" || tj.Spec.Env["LEVEL"] != "job" || tj.Spec.Steps[0].Env["LEVEL"] != "step" {
		t.Fatalf("env levels: %v %v", tj.Spec.Env, tj.Spec.Steps[0].Env)
	}
	if fmt.Sprint(tj.Needs) != "[lint]" || fmt.Sprint(tj.Labels) != "[linux]" {
		t.Fatalf("needs/labels %v %v", tj.Needs, tj.Labels)
	}
	pk := byName["package"]
	if fmt.Sprint(pk.Needs) != "[test (1.22, debian) test (1.23, debian)]" || pk.TimeoutSeconds != 300 ||
		pk.RetryLeaseLost != 2 || pk.RetryFailed != 1 || pk.Spec.Cache.Key != "deps-v1" || pk.Spec.Artifacts[0].Name != "dist" {
		t.Fatalf("package: %+v", pk)
	}
	if pub := byName["publish"]; fmt.Sprint(pub.Spec.NeedArtifacts) != "[{package dist}]" {
		t.Fatalf("publish downloads %v", pub.Spec.NeedArtifacts)
	}
}

// TestErrors: every problem is reported at once, each with its position
// and field path.
func TestErrors(t *testing.T) {
	src := `jobs:
  a:
    needs: [b]
    steps:
      - run: echo a
  b:
    needs: [a]
    steps:
      - name: no run
  c:
    runs-on: linux
    colour: blue
    timeout-minutes: ten
    steps:
      - run: echo ${{ secrets.TOKEN }}
  d:
    needs: [ghost]
    download: [{job: a, name: dist}]
    steps: [{run: x, shelll: zsh}]
`
	errs := parseErrors(t, ".forgeci.yml", src)
	err := error(errs)
	want := []string{
		".forgeci.yml:9:9: jobs.b.steps[0].run: run is required",
		".forgeci.yml:12:5: jobs.c.colour: unknown key \"colour\"",
		".forgeci.yml:13:22: jobs.c.timeout-minutes: must be an integer",
		".forgeci.yml:17:12: jobs.d.needs: job \"d\" needs unknown job \"ghost\"",
		"jobs.d.download[0]: job \"a\" is not in needs",
		".forgeci.yml:19:22: jobs.d.steps[0].shelll: unknown key \"shelll\"",
		"needs form a cycle: a -> b -> a",
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
	// Errors in later stages (expressions) are reported once the structure is sound.
	_, err = pipeline.Parse("p.yml", []byte("jobs:\n  c:\n    steps:\n      - run: echo ${{ nope.X }}\n"))
	if err == nil || !strings.Contains(err.Error(), `p.yml:4:19: jobs.c.steps[0].run: ${{ nope.X }}: context "nope" is not available here`) {
		t.Fatalf("expression error: %v", err)
	}
}

// TestSecrets: ${{ secrets.NAME }} is kept (canonically) in env values and
// run scripts for the claim to fill in, secrets: lists names, and secrets
// anywhere else, or badly named, are located errors.
func TestSecrets(t *testing.T) {
	p, err := pipeline.Parse("p.yml", []byte(`env: {GLOBAL: "${{secrets.ORG_TOKEN}}"}
jobs:
  deploy:
    secrets: [DEPLOY_KEY]
    env: {TOKEN: "x-${{ secrets.DEPLOY_TOKEN }}-y"}
    steps:
      - run: deploy --token ${{ secrets.API_TOKEN }}
        env: {S: "${{ secrets.STEP_ONE }}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Jobs[0].Spec
	if got := spec.Env["TOKEN"]; got != "x-${{ secrets.DEPLOY_TOKEN }}-y" {
		t.Errorf("env TOKEN = %q", got)
	}
	if got := spec.Env["GLOBAL"]; got != "${{ secrets.ORG_TOKEN }}" {
		t.Errorf("env GLOBAL = %q (not canonical)", got)
	}
	want := []string{"API_TOKEN", "DEPLOY_KEY", "DEPLOY_TOKEN", "ORG_TOKEN", "STEP_ONE"}
	if got := spec.SecretNames(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("SecretNames = %v, want %v", got, want)
	}
	used := spec.ExpandSecrets(map[string]string{"DEPLOY_TOKEN": "dt-value", "API_TOKEN": "api-value"}, false)
	if spec.Env["TOKEN"] != "x-dt-value-y" || spec.Steps[0].Run != "deploy --token api-value" || spec.Steps[0].Env["S"] != "" {
		t.Errorf("expanded: env %v, run %q, step env %v", spec.Env, spec.Steps[0].Run, spec.Steps[0].Env)
	}
	if len(used) != 2 || used["DEPLOY_TOKEN"] != "dt-value" {
		t.Errorf("used = %v", used)
	}
	for _, bad := range []struct{ src, want string }{
		{"jobs:\n  c:\n    cache: {key: \"k-${{ secrets.X }}\", paths: [a]}\n    steps: [{run: x}]\n", "jobs.c.cache.key: ${{ secrets.X }}: secrets may be used only in env values and run scripts"},
		{"jobs:\n  c:\n    steps: [{run: \"${{ secrets.lower }}\"}]\n", "secret names are upper-case"},
		{"jobs:\n  c:\n    secrets: [bad-name]\n    steps: [{run: x}]\n", `p.yml:3:14: jobs.c.secrets: secret name "bad-name" must be upper-case`},
	} {
		_, err := pipeline.Parse("p.yml", []byte(bad.src))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: got %v, want %q", bad.src, err, bad.want)
		}
	}
}

func TestRejects(t *testing.T) {
	cases := map[string]string{
		"not yaml":         "jobs: [unclosed",
		"no jobs":          "env: {A: b}\n",
		"empty jobs":       "jobs: {}\n",
		"duplicate job":    "jobs:\n  a:\n    steps: [{run: x}]\n  a:\n    steps: [{run: y}]\n",
		"bad job name":     "jobs:\n  'a b':\n    steps: [{run: x}]\n",
		"reserved env":     "jobs:\n  a:\n    env: {FORGECI_X: 1}\n    steps: [{run: x}]\n",
		"escaping path":    "jobs:\n  a:\n    steps: [{run: x}]\n    artifacts: [{name: d, paths: [../../etc]}]\n",
		"matrix too big":   "jobs:\n  a:\n    strategy: {matrix: {x: [" + strings.Repeat("1,", 20) + "1], y: [" + strings.Repeat("1,", 20) + "1]}}\n    steps: [{run: x}]\n",
		"retry too many":   "jobs:\n  a:\n    retry: {lease-lost: 50}\n    steps: [{run: x}]\n",
		"two documents":    "jobs:\n  a:\n    steps: [{run: x}]\n---\njobs: {}\n",
		"steps not a list": "jobs:\n  a:\n    steps: {run: x}\n",
	}
	for name, src := range cases {
		if _, err := pipeline.Parse("f.yml", []byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.HasPrefix(err.Error(), "f.yml:") {
			t.Errorf("%s: error without position: %v", name, err)
		}
	}
}

// FuzzParse: any input either parses into jobs that satisfy the DAG rules
// or fails with located errors; never a panic. Each is parsed or refused
// within a second and 64 MB (the bounded parser's promise, kept loose for
// a busy machine: a realistic pipeline at the size limit takes 50 ms and
// 26 MB), and the pre-scan never counts fewer tokens than go-yaml makes.
func FuzzParse(f *testing.F) {
	src, _ := os.ReadFile("testdata/example.yml")
	f.Add(src)
	f.Add([]byte("jobs:\n  a:\n    steps: [{run: x}]\n"))
	f.Add([]byte("jobs: {a: {needs: [a], steps: []}}"))
	f.Add([]byte("jobs:\n  a:\n    steps:\n      - uses: actions/checkout@v4\n        with: {fetch-depth: 0, submodules: false}\n      - run: x\n"))
	f.Add(pipelinetest.Realistic(8 << 10))
	for _, c := range pipelinetest.Adversarial(4 << 10) {
		f.Add(c.Src)
	}
	for _, s := range tokenCountCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := parseCost(data)
		if got.d > time.Second || got.alloc > maxParseBytes {
			t.Fatalf("%d bytes: %v and %d MB", len(data), got.d, got.alloc>>20)
		}
		if got.err != nil {
			if !strings.HasPrefix(got.err.Error(), "f.yml:") {
				t.Fatalf("unlocated error: %v", got.err)
			}
		} else {
			checkJobs(t, got.p)
		}
		if len(data) > pipeline.MaxFileBytes || !utf8.Valid(data) {
			return
		}
		if n, err := pipeline.PrescanTokens(data); err == nil {
			if want := len(lexer.Tokenize(string(data))); n < want {
				t.Fatalf("pre-scan counted %d tokens, go-yaml makes %d", n, want)
			}
		}
	})
}

// checkJobs: names are unique, every job has steps and needs known jobs.
func checkJobs(t *testing.T, p *pipeline.Pipeline) {
	seen := map[string]bool{}
	for _, j := range p.Jobs {
		if seen[j.Name] || len(j.Spec.Steps) == 0 {
			t.Fatalf("bad job %+v", j)
		}
		seen[j.Name] = true
	}
	for _, j := range p.Jobs {
		for _, n := range j.Needs {
			if !seen[n] {
				t.Fatalf("job %q needs unknown %q", j.Name, n)
			}
		}
	}
}
