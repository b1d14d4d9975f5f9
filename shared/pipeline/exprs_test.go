package pipeline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestExpressionErrorsLocated: every expression that does not parse is
// reported at once, at the line and column of the problem inside a plain,
// a quoted and a block scalar.
func TestExpressionErrorsLocated(t *testing.T) {
	src := "jobs:\n" +
		"  a:\n" +
		"    env: {X: \"v${{ nope() }}\"}\n" + // line 3
		"    steps:\n" +
		"      - run: echo ${{ matrix. }}\n" + // line 5
		"      - run: |\n" +
		"          echo one\n" +
		"          echo ${{ contains('a') }}\n" // line 8
	errs := parseErrors(t, "f.yml", src)
	want := []string{
		"f.yml:3:20: jobs.a.env.X: expression: unknown function nope()",
		"f.yml:5:31: jobs.a.steps[0].run: expression:",
		"f.yml:8:20: jobs.a.steps[1].run: expression: contains() takes 2 arguments, not 1",
	}
	got := errs.Error()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
	lines := strings.Split(src, "\n")
	for _, e := range errs {
		if e.Line == 3 || e.Line == 5 || e.Line == 8 {
			rest := lines[e.Line-1][e.Column-1:]
			if !strings.HasPrefix(rest, "nope") && !strings.HasPrefix(rest, "}}") && !strings.HasPrefix(rest, "contains") {
				t.Errorf("%v points at %q", e, rest)
			}
		}
	}
}

// TestMatrixExpressions: a job's fields may use whole expressions over the
// matrix, with functions, braces inside strings and any case of an axis.
func TestMatrixExpressions(t *testing.T) {
	src := `jobs:
  test:
    strategy: {matrix: {OS: [linux, mac], go: ["1.22"]}}
    runs-on: ${{ matrix.os }}
    steps:
      - run: echo ${{ format('{0}-{1}', matrix.os, matrix.go) }} ${{ matrix.os == 'linux' && 'penguin' || 'apple' }} ${{ '}}' }}
`
	p, err := pipeline.Parse("f.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, j := range p.Jobs {
		got[j.Spec.Steps[0].Run] = strings.Join(j.Labels, ",")
	}
	for run, labels := range map[string]string{"echo linux-1.22 penguin }}": "linux", "echo mac-1.22 apple }}": "mac"} {
		if got[run] != labels {
			t.Errorf("want a job running %q on %q, got %v", run, labels, got)
		}
	}
	_, err = pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    strategy: {matrix: {os: [x]}}\n    steps: [{run: '${{ matrix.arch }}'}]\n"))
	if err == nil || !strings.Contains(err.Error(), `matrix has no axis "arch"`) {
		t.Fatalf("unknown axis: %v", err)
	}
}

// parseErrors parses src, which must be refused, and returns its errors.
func parseErrors(t *testing.T, file, src string) pipeline.Errors {
	t.Helper()
	_, err := pipeline.Parse(file, []byte(src))
	var errs pipeline.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want located errors, got %v", err)
	}
	return errs
}
