package pipeline_test

import (
	"os"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestDocumentedExamples: the pipeline the README shows a newcomer, and
// the one docs/pipeline.md opens with, parse into the jobs they describe.
func TestDocumentedExamples(t *testing.T) {
	for _, doc := range []struct {
		file, after, end string
		indented         bool // by four spaces, as a Markdown code block
		jobs             int
	}{
		{"../../README.md", "A pipeline is `.forgeci.yml` at the root of the repository:\n\n", "\n\n", true, 2},
		// test: two go versions (include adds a key to 1.23); package.
		{"../../docs/pipeline.md", "```yaml\n", "```", false, 3},
	} {
		raw, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(raw), doc.after)
		yml, _, closed := strings.Cut(rest, doc.end)
		if !ok || !closed {
			t.Fatalf("%s has no example pipeline", doc.file)
		}
		if doc.indented {
			yml = strings.ReplaceAll("\n"+yml, "\n    ", "\n")
		}
		p, err := pipeline.Parse(pipeline.FileName, []byte(yml))
		if err != nil {
			t.Fatalf("the example in %s does not parse:\n%s\n%v", doc.file, yml, err)
		}
		if len(p.Jobs) != doc.jobs {
			t.Fatalf("the example in %s has %d jobs, want %d", doc.file, len(p.Jobs), doc.jobs)
		}
	}
}
