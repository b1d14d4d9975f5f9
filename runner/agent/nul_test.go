package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/junit"
	"github.com/forgeci/forgeci/shared/protocol"
)

// TestReportTextHasNoNUL: a job's free text (a test report's failure, a
// step's name) goes up with NUL as U+FFFD: the server refuses a string
// holding NUL, and the whole report would be lost with it.
func TestReportTextHasNoNUL(t *testing.T) {
	j := &job{logs: newLogAppender(nil, nil), ws: "/w"}
	f := j.failure(junit.Failure{Suite: "s\x00", Class: "c\x00", Name: "T\x00x", Kind: "failure",
		Message: "got \x00, want 1", Text: "\x00\xff\x00", File: "/w/a\x00.go", Line: 3})
	req := protocol.ReportRequest{Summary: protocol.TestSummary{Tests: 1, Failed: 1, Failures: []protocol.TestFailure{f}}}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `\u0000`) || strings.IndexByte(string(b), 0) >= 0 {
		t.Fatalf("a NUL is sent: %s", b)
	}
	if f.Message != "got \uFFFD, want 1" || f.Text != "\uFFFD\uFFFD\uFFFD" || f.Name != "T\uFFFDx" || f.File != "a\uFFFD.go" {
		t.Fatalf("sanitised as %+v", f)
	}
	if err := req.Validate(); err != nil {
		t.Fatalf("the server's check: %v", err)
	}
	if got := truncateName("build\x00"); got != "build\uFFFD" {
		t.Fatalf("a step's name: %q", got)
	}
}
