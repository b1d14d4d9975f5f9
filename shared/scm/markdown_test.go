package scm

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// TestCheckRunMarkdownIsShownAsWritten: what a fork controls in a check
// run's summary (a matrix job's name, a concurrency group named in its
// reason, a test report's names, files and messages, a broken pipeline's
// error) renders as text, never as a link,
// an image or markup, however it tries to close its code span or block.
// Rendered as GitHub renders Markdown (GFM, bare URLs linked).
func TestCheckRunMarkdownIsShownAsWritten(t *testing.T) {
	hostile := []string{
		"[re-authorise](https://evil.example/login)",
		"x` ![](https://evil.example/p.png) `y",
		"``` ![](https://evil.example/p.png)",
		"a\n\n[b](https://evil.example/)\r<img src=x>",
		"https://evil.example/bare",
		"`",
	}
	w := &Worker{}
	for _, h := range hostile {
		f := protocol.TestFailure{Class: h, Name: h, Message: h, File: h, Line: 3}
		v := w.describe(store.CheckWork{JobID: "j", Name: "build (" + h + ")", Project: "acme/app", JobState: domain.JobFailed,
			Reason: "waiting for concurrency group " + h,
			Report: &protocol.TestSummary{Tests: 1, Failed: 1, Failures: []protocol.TestFailure{f}}, FinishedAt: ptr(time.Now())})
		notice := w.describe(store.CheckWork{Notice: "line 3: " + h})
		for name, out := range map[string]*github.CheckRunOutput{"report": v.output, "notice": notice.output} {
			var html bytes.Buffer
			if err := goldmark.New(goldmark.WithExtensions(extension.GFM)).Convert([]byte(out.GetSummary()), &html); err != nil {
				t.Fatal(err)
			}
			if s := html.String(); strings.Contains(s, "<a ") || strings.Contains(s, "<img") || strings.Contains(s, "evil.example/p.png\"") {
				t.Errorf("%s with %q renders markup:\n%s\n%s", name, h, out.GetSummary(), s)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }
