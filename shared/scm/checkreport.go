package scm

import (
	"fmt"
	"strings"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// maxAnnotations is what GitHub takes in one check run request.
const maxAnnotations = 50

// GitHub's bounds on a check run's output (it refuses a request past
// them, 422): a summary or text of 65,535 characters, an annotation's
// title of 255, its message and raw details of 64 KB. Bytes bound
// characters, so cutting at a byte count under each is safe.
const (
	maxSummaryBytes         = 60000
	maxAnnotationTitleBytes = 255
	maxAnnotationBytes      = 60000
	maxListedNameBytes      = 200 // a failure's name in the summary's list
	maxListedMessageBytes   = 500
)

// clip cuts s to at most n bytes, on a character's boundary, marking the
// cut with an ellipsis; bytes that are no character become U+FFFD first
// (as JSON would, after the count).
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	return domain.Truncate(s, n-len("…")) + "…"
}

// withReport adds a job's test report to its check run's output: the
// counts in the title and summary, the first failures listed, and an
// annotation at each failure's file:line (GitHub shows them on the pull
// request's diff).
func withReport(out *github.CheckRunOutput, title string, r *protocol.TestSummary) {
	if r == nil {
		return
	}
	bad := r.Failed + r.Errored
	if bad > 0 {
		title = fmt.Sprintf("%s: %d of %d tests failed", title, bad, r.Tests)
	} else {
		title = fmt.Sprintf("%s: %d tests passed", title, r.Passed)
	}
	out.Title = github.String(title)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n**Tests**: %d passed, %d failed, %d errored, %d skipped (%d report files).",
		out.GetSummary(), r.Passed, r.Failed, r.Errored, r.Skipped, r.Files)
	for i, f := range r.Failures {
		if i == 10 {
			fmt.Fprintf(&b, "\n- … and %d more", len(r.Failures)-10)
			break
		}
		// Code spans: a fork's report must not put links or images
		// into the project's check runs.
		at := ""
		if w := where(f); w != "" {
			at = " (" + mdCode(clip(w, maxListedNameBytes)) + ")"
		}
		fmt.Fprintf(&b, "\n- %s%s: %s", mdCode(clip(testName(f), maxListedNameBytes)), at,
			mdCode(clip(firstLine(f.Message), maxListedMessageBytes)))
	}
	out.Summary = github.String(clip(b.String(), maxSummaryBytes))
	for _, f := range r.Failures {
		if f.File == "" || f.Line <= 0 || strings.HasPrefix(f.File, "/") || len(out.Annotations) == maxAnnotations {
			continue
		}
		msg := f.Message
		if msg == "" {
			msg = f.Kind
		}
		out.Annotations = append(out.Annotations, &github.CheckRunAnnotation{
			Path: github.String(f.File), StartLine: github.Int(f.Line), EndLine: github.Int(f.Line),
			AnnotationLevel: github.String("failure"), Title: github.String(clip(testName(f), maxAnnotationTitleBytes)),
			Message: github.String(clip(msg, maxAnnotationBytes)), RawDetails: nonEmpty(clip(f.Text, maxAnnotationBytes))})
	}
}

// mdCode is s as a Markdown code span, shown as written whatever it holds:
// line breaks become spaces, and the span's fence is longer than any run
// of backticks in s. Empty stays empty.
func mdCode(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if s == "" {
		return ""
	}
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	if s[0] == '`' || s[len(s)-1] == '`' || (s[0] == ' ' && s[len(s)-1] == ' ') {
		s = " " + s + " " // a space each side, which the span drops, keeps these
	}
	return fence + s + fence
}

// mdBlock is s as a fenced Markdown code block that s cannot close.
func mdBlock(s string) string {
	fence := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	return fence + "\n" + s + "\n" + fence
}

func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := range len(s) {
		if s[i] != c {
			run = 0
			continue
		}
		run++
		longest = max(longest, run)
	}
	return longest
}

func testName(f protocol.TestFailure) string {
	if f.Class != "" {
		return f.Class + "." + f.Name
	}
	return f.Name
}

func where(f protocol.TestFailure) string {
	if f.File == "" {
		return ""
	}
	if f.Line > 0 {
		return fmt.Sprintf("%s:%d", f.File, f.Line)
	}
	return f.File
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return github.String(s)
}
