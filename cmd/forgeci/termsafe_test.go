package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/forgeci/forgeci/shared/protocol"
)

// safe writes chunks through a termSafe, flushes, and returns the output.
func safe(t testing.TB, chunks ...string) string {
	var out bytes.Buffer
	ts := &termSafe{w: &out}
	for _, c := range chunks {
		if n, err := ts.Write([]byte(c)); err != nil || n != len(c) {
			t.Fatalf("write %q: %d %v", c, n, err)
		}
	}
	if err := ts.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestTermSafe: colours and text pass, each ending with its line; cursor
// moves, OSC (a window title, the clipboard), C1 controls and a lone
// carriage return (which would print over a line) are shown, not obeyed,
// even split across writes.
func TestTermSafe(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"ok \x1b[31mred\x1b[0m\ttab\r\n"}, "ok \x1b[31mred\x1b[0m\ttab\n"},
		{[]string{"\x1b]52;c;ZXZpbA==\x07"}, "^[]52;c;ZXZpbA==^G"},
		{[]string{"FAILED\x1b[1A\x1b[2K"}, "FAILED^[[1A^[[2K"},
		{[]string{"FAILED\rPASSED\n"}, "FAILED\nPASSED\n"},
		{[]string{"\u009b31m \x00 \x7f"}, "\uFFFD31m ^@ ^?"},
		{[]string{"\x1b[3", "1mred"}, "\x1b[31mred\x1b[0m"},
		// A style ends with its line, and with the log.
		{[]string{"\x1b[8mconcealed\nshown \x1b[1;31mbold\x1b[m plain\n"}, "\x1b[8mconcealed\x1b[0m\nshown \x1b[1;31mbold\x1b[m plain\n"},
		{[]string{"\x1b[30;40mblack on black\r", "\n"}, "\x1b[30;40mblack on black\x1b[0m\n"},
		{[]string{"\xe2\x82", "\xac"}, "€"},
		{[]string{"a\r", "\nb"}, "a\nb"},
		{[]string{"end \x1b["}, "end ^[["},
		{[]string{"end \xc2"}, "end \uFFFD"},
		{[]string{"end\r"}, "end\n"},
		{[]string{"bad \xff utf-8"}, "bad \uFFFD utf-8"},
	} {
		if got := safe(t, c.in...); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

// sgr is the only escape sequence termSafe lets through.
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// FuzzTermSafe: whatever a job prints, split anywhere, what reaches the
// terminal holds no control character but tab, newline and colours, no
// C1 control, and is valid UTF-8; bounded in size and time.
func FuzzTermSafe(f *testing.F) {
	f.Add([]byte("ok \x1b[31mred\x1b[0m\r\n\x1b]0;title\x07\u009b"), 3)
	f.Fuzz(func(t *testing.T, data []byte, split int) {
		if split < 0 || split > len(data) {
			split = len(data) / 2
		}
		start := time.Now()
		got := safe(t, string(data[:split]), string(data[split:]))
		if time.Since(start) > time.Second {
			t.Fatalf("%d bytes took %v", len(data), time.Since(start))
		}
		if len(got) > 3*len(data)+8 {
			t.Fatalf("%d bytes became %d", len(data), len(got))
		}
		rest := sgr.ReplaceAllString(got, "")
		if !utf8.ValidString(rest) {
			t.Fatalf("invalid UTF-8 out: %q", got)
		}
		for _, r := range rest {
			if (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
				t.Fatalf("control %U out of %q: %q", r, data, got)
			}
		}
	})
}

// TestReportIsShownNotObeyed: a test report's names, files and messages
// are a job's text; through the terminal's writer, a carriage return, a
// C1 CSI and escapes in them, colours too, are shown, not obeyed.
func TestReportIsShownNotObeyed(t *testing.T) {
	var out bytes.Buffer
	ts := &termSafe{w: &out, plain: true}
	r := report{}
	r.Failures = append(r.Failures, protocol.TestFailure{Kind: "failure", Name: "n\x1b]52;c;aGk=\x07", File: "f\u009b2J",
		Message: "PASSED\roverwritten \x1b[8mconcealed"})
	if err := printReport(ts, r); err != nil {
		t.Fatal(err)
	}
	if err := ts.Flush(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.ContainsAny(got, "\r\x1b\x07\u009b") {
		t.Errorf("the report reached the terminal with its controls: %q", got)
	}
	if !strings.Contains(got, "PASSED\noverwritten ^[[8mconcealed") || !strings.Contains(got, "^[]52") {
		t.Errorf("the report's text was not shown: %q", got)
	}
}
