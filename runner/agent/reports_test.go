package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/protocol"
)

// TestReportWalkBounds: the walk for report files finds what the
// patterns match, not below its depth, not through links, and stops at
// its budget saying so.
func TestReportWalkBounds(t *testing.T) {
	ws := t.TempDir()
	deep := ws
	for i := range maxWalkDepth + 5 {
		deep = filepath.Join(deep, "d")
		if err := os.Mkdir(deep, 0o755); err != nil {
			t.Fatal(err)
		}
		if i == 3 || i == maxWalkDepth+3 {
			if err := os.WriteFile(filepath.Join(deep, "TEST-x.xml"), []byte("<testsuite/>"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink("/etc", filepath.Join(ws, "etc")); err != nil {
		t.Fatal(err)
	}
	j := &job{ctx: context.Background(), ws: ws}
	files, err := j.reportFiles([]string{"**/TEST-*.xml", "etc/**"})
	if err != nil || len(files) != 1 || files[0] != "d/d/d/d/TEST-x.xml" {
		t.Fatalf("files %v, %v", files, err)
	}
	for i := range maxReportFiles + 1 {
		if err := os.WriteFile(filepath.Join(ws, "r"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+itoa(i)+".xml"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err = j.reportFiles([]string{"*.xml"})
	if len(files) != maxReportFiles || err == nil || !strings.Contains(err.Error(), "match over") {
		t.Fatalf("%d files, %v", len(files), err)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// TestFitSummary: a summary whose failures would not fit the route's body
// once written as JSON loses failures from the end, saying so.
func TestFitSummary(t *testing.T) {
	sum := protocol.TestSummary{Tests: 100, Failed: 100}
	for range 100 {
		sum.Failures = append(sum.Failures, protocol.TestFailure{Name: "T", Kind: "failure",
			Message: strings.Repeat("<", 4096), Text: strings.Repeat("&", 4096)})
	}
	fitSummary(&sum)
	b, _ := json.Marshal(sum)
	if len(b) > protocol.MaxReportBody*3/4 || !sum.Truncated || len(sum.Failures) == 0 || len(sum.Failures) == 100 {
		t.Fatalf("%d bytes, %d failures, truncated %v", len(b), len(sum.Failures), sum.Truncated)
	}
	if got := dropCutTail("abcdef…", 3); got != "abcd…" {
		t.Fatalf("a cut text's tail: %q", got)
	}
	if got := dropCutTail("abcdef", 3); got != "abcdef" {
		t.Fatalf("an uncut text: %q", got)
	}
}
