package protocol

import (
	"strings"
	"testing"
	"time"
)

// TestLogsRequestChecks: marks lie in the data, rise and are plausible
// times; step events name a step and a section within the log.
func TestLogsRequestChecks(t *testing.T) {
	now := time.Now().UTC()
	ms := now.UnixMilli()
	off := int64(10)
	end, past, before := int64(14), int64(99), int64(3)
	earlier := now.Add(-time.Hour)
	good := StepEvent{Index: 1, Name: "build", LogOffset: 10, StartedAt: now}
	ended := good
	ended.EndOffset, ended.FinishedAt, ended.Conclusion = &end, &now, "success"
	for name, tc := range map[string]struct {
		times []LineTime
		steps []StepEvent
		want  string
	}{
		"fine":                 {[]LineTime{{0, ms}, {2, ms + 1}}, []StepEvent{good, ended}, ""},
		"mark mid-line":        {[]LineTime{{1, ms}}, nil, "does not start a line"},
		"mark past the data":   {[]LineTime{{4, ms}}, nil, "offsets rise and lie in the data"},
		"marks out of order":   {[]LineTime{{2, ms}, {1, ms}}, nil, "offsets rise"},
		"a time in 1970":       {[]LineTime{{0, 5}}, nil, "from 2000 to 2200"},
		"more marks than data": {[]LineTime{{0, ms}, {1, ms}, {2, ms}, {3, ms}, {3, ms}}, nil, "at most one a byte"},
		"marks out of order 2": {[]LineTime{{2, ms}, {0, ms}}, nil, "offsets rise"},
		"section past the log": {nil, []StepEvent{{Index: 0, Name: "x", LogOffset: 15, StartedAt: now}}, "not in the log"},
		"negative index":       {nil, []StepEvent{{Index: -1, Name: "x", StartedAt: now}}, "index -1"},
		"no name":              {nil, []StepEvent{{Index: 0, StartedAt: now}}, "name is 1 to"},
		"long name":            {nil, []StepEvent{{Index: 0, Name: strings.Repeat("n", 513), StartedAt: now}}, "name is 1 to"},
		"no start":             {nil, []StepEvent{{Index: 0, Name: "x"}}, "started_at is required"},
		"half an end":          {nil, []StepEvent{{Index: 0, Name: "x", StartedAt: now, Conclusion: "success"}}, "an ended step has"},
		"unknown conclusion":   {nil, []StepEvent{{Index: 0, Name: "x", StartedAt: now, EndOffset: &end, FinishedAt: &now, Conclusion: "ok"}}, "an ended step has"},
		"end past the log":     {nil, []StepEvent{{Index: 0, Name: "x", StartedAt: now, EndOffset: &past, FinishedAt: &now, Conclusion: "failure"}}, "end_offset 99"},
		"end before start":     {nil, []StepEvent{{Index: 0, Name: "x", LogOffset: 5, StartedAt: now, EndOffset: &before, FinishedAt: &now, Conclusion: "failure"}}, "end_offset 3"},
		"finished before":      {nil, []StepEvent{{Index: 0, Name: "x", StartedAt: now, EndOffset: &end, FinishedAt: &earlier, Conclusion: "failure"}}, "before started_at"},
	} {
		r := LogsRequest{Offset: &off, Data: []byte("a\ncd"), Times: tc.times, Steps: tc.steps}
		err := r.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestReportRequestChecks: a report's counts add up and its text is
// bounded.
func TestReportRequestChecks(t *testing.T) {
	fail := TestFailure{Name: "TestX", Kind: "failure", Message: "boom", File: "x_test.go", Line: 3}
	for name, tc := range map[string]struct {
		sum  TestSummary
		want string
	}{
		"fine":           {TestSummary{Files: 1, Tests: 3, Passed: 1, Failed: 1, Skipped: 1, Failures: []TestFailure{fail}}, ""},
		"counts off":     {TestSummary{Tests: 3, Passed: 1}, "add up to 1, not tests 3"},
		"negative":       {TestSummary{Tests: -1, Passed: -1}, "counts are from 0"},
		"more failures":  {TestSummary{Tests: 1, Passed: 1, Failures: []TestFailure{fail}}, "no more than failed and errored"},
		"unnamed":        {TestSummary{Tests: 1, Failed: 1, Failures: []TestFailure{{Kind: "failure"}}}, "names its test"},
		"unknown kind":   {TestSummary{Tests: 1, Failed: 1, Failures: []TestFailure{{Name: "x", Kind: "oops"}}}, "failure or error"},
		"long message":   {TestSummary{Tests: 1, Failed: 1, Failures: []TestFailure{{Name: "x", Kind: "error", Message: strings.Repeat("m", 5000)}}}, "at most 4096 bytes"},
		"bad utf-8 file": {TestSummary{Tests: 1, Failed: 1, Failures: []TestFailure{{Name: "x", Kind: "error", File: "\xff"}}}, "UTF-8"},
		"negative line":  {TestSummary{Tests: 1, Failed: 1, Failures: []TestFailure{{Name: "x", Kind: "error", Line: -2}}}, "line is from 0"},
		"negative time":  {TestSummary{Seconds: -1}, "seconds is from 0"},
	} {
		r := ReportRequest{Summary: tc.sum}
		err := r.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
