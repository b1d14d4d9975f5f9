package protocol

import (
	"math"
	"time"
	"unicode/utf8"

	"github.com/forgeci/forgeci/shared/domain"
)

// LineTime marks that a line of an append's data starts at byte Offset
// of the data and that the runner saw it at UnixMilli. A line without a
// mark has the time of the mark before it. On the wire: [offset, ms].
type LineTime [2]int64

// Offset is where the marked line starts in the data.
func (t LineTime) Offset() int64 { return t[0] }

// Time is when the runner saw the line.
func (t LineTime) Time() time.Time { return time.UnixMilli(t[1]).UTC() }

// StepEvent records one step of the attempt as it starts and again as it
// ends: its index among the job's steps, its name, where its section of
// the log starts (LogOffset: its "==> step" line) and, once it has ended,
// where that section ends, when, its exit code and its conclusion.
type StepEvent struct {
	Index      int        `json:"index"`
	Name       string     `json:"name"`
	LogOffset  int64      `json:"log_offset"`
	StartedAt  time.Time  `json:"started_at"`
	EndOffset  *int64     `json:"end_offset,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Conclusion string     `json:"conclusion,omitempty"`
}

// Limits of what one append may carry beside its data.
const (
	MaxLineTimes     = 1 << 16
	MaxStepEvents    = 256
	MaxStepIndex     = 999
	MaxStepNameBytes = 512
)

// conclusions are a step's ends, as GitHub names them.
var conclusions = map[string]bool{"success": true, "failure": true, "skipped": true, "cancelled": true}

// checkTimes checks the marks lie in the data, in order, at line starts
// (the data's first byte, or one after a newline: so no more marks than
// lines), at plausible times (a runner's clock is its own, but not before
// 2000 or after 2200).
func checkTimes(times []LineTime, data []byte) error {
	n := len(data)
	if len(times) > MaxLineTimes || len(times) > n {
		return domain.Errorf(domain.EInvalid, "field times holds %d marks for %d bytes (at most one a byte, and %d)", len(times), n, MaxLineTimes)
	}
	lo, hi := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	prev := int64(-1)
	for _, t := range times {
		if t.Offset() <= prev || t.Offset() >= int64(n) {
			return domain.Errorf(domain.EInvalid, "field times: offsets rise and lie in the data, not %d", t.Offset())
		}
		if t.Offset() > 0 && data[t.Offset()-1] != '\n' {
			return domain.Errorf(domain.EInvalid, "field times: offset %d does not start a line", t.Offset())
		}
		if t[1] < lo || t[1] >= hi {
			return domain.Errorf(domain.EInvalid, "field times: %d is not a time in milliseconds since 1970 from 2000 to 2200", t[1])
		}
		prev = t.Offset()
	}
	return nil
}

// checkSteps checks each step event names a step and a section that ends
// no later than the log does once this append lands (end).
func checkSteps(steps []StepEvent, end int64) error {
	if len(steps) > MaxStepEvents {
		return domain.Errorf(domain.EInvalid, "field steps holds %d events, over %d", len(steps), MaxStepEvents)
	}
	for _, s := range steps {
		switch {
		case s.Index < 0 || s.Index > MaxStepIndex:
			return domain.Errorf(domain.EInvalid, "field steps: index %d is not from 0 to %d", s.Index, MaxStepIndex)
		case s.Name == "" || len(s.Name) > MaxStepNameBytes || !utf8.ValidString(s.Name):
			return domain.Errorf(domain.EInvalid, "field steps: a step's name is 1 to %d bytes of UTF-8", MaxStepNameBytes)
		case s.LogOffset < 0 || s.LogOffset > end:
			return domain.Errorf(domain.EInvalid, "field steps: log_offset %d is not in the log (0 to %d)", s.LogOffset, end)
		case s.StartedAt.IsZero():
			return domain.Errorf(domain.EInvalid, "field steps: started_at is required")
		}
		if err := checkStepEnd(s, end); err != nil {
			return err
		}
	}
	return nil
}

// checkStepEnd checks an ended step's fields come together and in order.
func checkStepEnd(s StepEvent, end int64) error {
	ended := s.EndOffset != nil || s.FinishedAt != nil || s.Conclusion != ""
	switch {
	case !ended && s.ExitCode == nil:
		return nil
	case s.EndOffset == nil || s.FinishedAt == nil || !conclusions[s.Conclusion]:
		return domain.Errorf(domain.EInvalid, "field steps: an ended step has end_offset, finished_at and a conclusion (success, failure, skipped or cancelled)")
	case *s.EndOffset < s.LogOffset || *s.EndOffset > end:
		return domain.Errorf(domain.EInvalid, "field steps: end_offset %d is not from log_offset %d to %d", *s.EndOffset, s.LogOffset, end)
	case s.FinishedAt.Before(s.StartedAt):
		return domain.Errorf(domain.EInvalid, "field steps: finished_at is before started_at")
	case s.ExitCode != nil && (*s.ExitCode < math.MinInt32 || *s.ExitCode > math.MaxInt32):
		return domain.Errorf(domain.EInvalid, "field steps: exit_code must be from %d to %d", math.MinInt32, math.MaxInt32)
	}
	return nil
}
