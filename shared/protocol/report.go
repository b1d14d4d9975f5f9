package protocol

import (
	"math"
	"unicode/utf8"

	"github.com/forgeci/forgeci/shared/domain"
)

// ReportRequest sends the summary of a job's test reports (reports:),
// once its steps have ended; a second one replaces the first.
type ReportRequest struct {
	Leased
	Summary TestSummary `json:"summary"`
}

// ReportResponse acknowledges a report.
type ReportResponse struct{}

// TestSummary sums up the test reports of one attempt: counts over every
// file read, and the first failures with where they are.
type TestSummary struct {
	Files   int     `json:"files"`
	Tests   int     `json:"tests"`
	Passed  int     `json:"passed"`
	Failed  int     `json:"failed"`
	Errored int     `json:"errored"`
	Skipped int     `json:"skipped"`
	Seconds float64 `json:"seconds"`
	// Failures are the first MaxReportFailures failing test cases;
	// Truncated says there were more.
	Failures  []TestFailure `json:"failures"`
	Truncated bool          `json:"truncated,omitempty"`
}

// TestFailure is one failing test case.
type TestFailure struct {
	Suite   string `json:"suite,omitempty"`
	Class   string `json:"class,omitempty"`
	Name    string `json:"name"`
	Kind    string `json:"kind"` // failure or error
	Message string `json:"message,omitempty"`
	Text    string `json:"text,omitempty"`
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
}

// Limits of a report summary. MaxReportBody bounds the request (text of
// control characters grows six times in JSON; a Lambda request is at
// most 6 MB).
const (
	MaxReportBody     = 4 << 20
	MaxReportFailures = 100
	MaxReportCount    = 10_000_000
	maxReportName     = 1024
	maxReportText     = 4096
)

// Validate checks the summary's counts add up and its text is bounded.
func (r *ReportRequest) Validate() error {
	s := r.Summary
	for _, n := range []int{s.Files, s.Tests, s.Passed, s.Failed, s.Errored, s.Skipped} {
		if n < 0 || n > MaxReportCount {
			return domain.Errorf(domain.EInvalid, "field summary: counts are from 0 to %d", MaxReportCount)
		}
	}
	if s.Passed+s.Failed+s.Errored+s.Skipped != s.Tests {
		return domain.Errorf(domain.EInvalid, "field summary: passed, failed, errored and skipped add up to %d, not tests %d",
			s.Passed+s.Failed+s.Errored+s.Skipped, s.Tests)
	}
	if math.IsNaN(s.Seconds) || s.Seconds < 0 || s.Seconds > 1e9 {
		return domain.Errorf(domain.EInvalid, "field summary: seconds is from 0 to 1e9")
	}
	if len(s.Failures) > MaxReportFailures || len(s.Failures) > s.Failed+s.Errored {
		return domain.Errorf(domain.EInvalid, "field summary: at most %d failures, and no more than failed and errored", MaxReportFailures)
	}
	for _, f := range s.Failures {
		if err := f.check(); err != nil {
			return err
		}
	}
	return nil
}

func (f TestFailure) check() error {
	for _, v := range []string{f.Suite, f.Class, f.Name, f.File} {
		if len(v) > maxReportName || !utf8.ValidString(v) {
			return domain.Errorf(domain.EInvalid, "field summary: names and files are at most %d bytes of UTF-8", maxReportName)
		}
	}
	for _, v := range []string{f.Message, f.Text} {
		if len(v) > maxReportText || !utf8.ValidString(v) {
			return domain.Errorf(domain.EInvalid, "field summary: a message or text is at most %d bytes of UTF-8", maxReportText)
		}
	}
	switch {
	case f.Name == "":
		return domain.Errorf(domain.EInvalid, "field summary: a failure names its test")
	case f.Kind != "failure" && f.Kind != "error":
		return domain.Errorf(domain.EInvalid, "field summary: a failure's kind is failure or error")
	case f.Line < 0 || f.Line > 10_000_000:
		return domain.Errorf(domain.EInvalid, "field summary: line is from 0 to 10000000")
	}
	return nil
}
