package pipeline_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pipeline"
)

func jobNames(t *testing.T, src string) []string {
	t.Helper()
	p, err := pipeline.Parse("f.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range p.Jobs {
		names = append(names, j.Name)
	}
	sort.Strings(names)
	return names
}

// TestMatrixInclude is GitHub's documented example of include: added keys
// go to every combination whose original values they keep, may overwrite
// values an earlier entry added, and an entry that fits none is a
// combination of its own.
func TestMatrixInclude(t *testing.T) {
	got := jobNames(t, `jobs:
  t:
    strategy:
      matrix:
        fruit: [apple, pear]
        animal: [cat, dog]
        include:
          - color: green
          - color: pink
            animal: cat
          - fruit: apple
            shape: circle
          - fruit: banana
          - fruit: banana
            animal: cat
    steps: [{run: "echo ${{ matrix.fruit }} ${{ matrix.color }}"}]
`)
	want := []string{"t (apple, cat, pink, circle)", "t (apple, dog, green, circle)", "t (banana)", "t (banana, cat)",
		"t (pear, cat, pink)", "t (pear, dog, green)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("jobs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMatrixExclude: an entry removes every combination with all its
// pairs (a partial match removes several), before include adds.
func TestMatrixExclude(t *testing.T) {
	got := jobNames(t, `jobs:
  t:
    strategy:
      fail-fast: false
      matrix:
        os: [linux, mac, windows]
        go: ["1.22", "1.23"]
        exclude:
          - os: windows
          - os: mac
            go: "1.22"
        include:
          - os: windows
            go: "1.23"
            experimental: "true"
    steps: [{run: "true"}]
`)
	want := []string{"t (linux, 1.22)", "t (linux, 1.23)", "t (mac, 1.23)", "t (windows, 1.23, true)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("jobs %v, want %v", got, want)
	}
	refuses(t, "jobs:\n  t:\n    strategy:\n      %s\n    steps: [{run: x}]\n", map[string]string{
		"matrix: {os: [a], exclude: [{os: a}]}":    "exclude removes every combination",
		"matrix: {include: []}":                    "at least one axis or include entry",
		"fail-fast: 'no'\n      matrix: {os: [a]}": "must be true or false",
		"max-parallel: 0\n      matrix: {os: [a]}": "must be between 1 and 256",
		"matrix: {os: [a], include: [x]}":          "must be a mapping",
	})
}

// refuses checks that each snippet, put into file (a format with one %s),
// is refused with an error that says its message.
func refuses(t *testing.T, file string, cases map[string]string) {
	t.Helper()
	for snippet, msg := range cases {
		_, err := pipeline.Parse("f.yml", []byte(fmt.Sprintf(file, snippet)))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: got %v, want %q", snippet, err, msg)
		}
	}
}

// TestMatrixHyphenatedAxis: axes are named as GitHub's starter workflows
// name them (node-version); expressions read them and the environment
// has FORGECI_MATRIX_NODE_VERSION.
func TestMatrixHyphenatedAxis(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte("jobs:\n  b:\n    strategy: {matrix: {node-version: [\"20.x\"]}}\n    steps: [{run: 'echo ${{ matrix.node-version }}'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Jobs[0].Spec
	if spec.Steps[0].Run != "echo 20.x" || spec.Env["FORGECI_MATRIX_NODE_VERSION"] != "20.x" || p.Jobs[0].Name != "b (20.x)" {
		t.Fatalf("job %+v", p.Jobs[0])
	}
}

// TestMatrixNamesArePlainText: a job's name with its matrix values is
// printed wherever the run is shown (a terminal among them) and names the
// CLI's download directory, so a value that would put a control character
// (an escape sequence, a newline) or more than MaxJobName characters into
// it is refused; a value with a slash is a plain name.
func TestMatrixNamesArePlainText(t *testing.T) {
	if got := jobNames(t, "jobs:\n  b:\n    strategy:\n      matrix:\n        target: [linux/amd64, \"../..\"]\n    steps: [{run: hi}]\n"); strings.Join(got, "|") != "b (../..)|b (linux/amd64)" {
		t.Fatalf("names %q", got)
	}
	for name, value := range map[string]string{
		"an escape sequence": `"\e]0;title\a"`, "a newline": `"a\nb"`, "a tab": `"a\tb"`, "C1 CSI": `"\u009b2J"`,
		"too long": strings.Repeat("x", pipeline.MaxJobName-3),
	} {
		src := "jobs:\n  b:\n    strategy:\n      matrix:\n        v: [" + value + "]\n    steps: [{run: hi}]\n"
		_, err := pipeline.Parse("f.yml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), "plain text") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Exactly at the bound: "b (" + value + ")".
	if got := jobNames(t, "jobs:\n  b:\n    strategy:\n      matrix:\n        v: ["+strings.Repeat("x", pipeline.MaxJobName-4)+"]\n    steps: [{run: hi}]\n"); len(got) != 1 {
		t.Fatalf("names %q", got)
	}
}
