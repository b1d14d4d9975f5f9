package pipeline_test

import (
	"os"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestReadmeExample: the pipeline the README shows a newcomer parses.
func TestReadmeExample(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "A pipeline is `.forgeci.yml`")
	if !ok {
		t.Fatal("README.md has no example pipeline")
	}
	var yml strings.Builder
	for _, line := range strings.Split(rest, "\n")[2:] {
		if !strings.HasPrefix(line, "    ") {
			break
		}
		yml.WriteString(strings.TrimPrefix(line, "    ") + "\n")
	}
	p, err := pipeline.Parse(pipeline.FileName, []byte(yml.String()))
	if err != nil {
		t.Fatalf("the README's example does not parse:\n%s\n%v", yml.String(), err)
	}
	if len(p.Jobs) != 2 {
		t.Fatalf("the README's example has %d jobs, want 2", len(p.Jobs))
	}
}

// TestDocsExample: the pipeline docs/pipeline.md opens with parses.
func TestDocsExample(t *testing.T) {
	raw, err := os.ReadFile("../../docs/pipeline.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "```yaml\n")
	yml, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/pipeline.md has no yaml example")
	}
	p, err := pipeline.Parse(pipeline.FileName, []byte(yml))
	if err != nil {
		t.Fatalf("the example in docs/pipeline.md does not parse:\n%v", err)
	}
	if len(p.Jobs) != 3 { // test: two go versions (include adds a key to 1.23); package
		t.Fatalf("the example has %d jobs, want 3", len(p.Jobs))
	}
}
