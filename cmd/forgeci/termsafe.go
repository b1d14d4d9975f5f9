package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A job's log is a stranger's bytes. Printed to a terminal as they are,
// escape sequences in it move the cursor over earlier lines (a fake
// "PASSED"), retitle the window or, on terminals that allow OSC 52, write
// the clipboard. termSafe passes text, tabs, newlines and colours (SGR,
// ESC [ params m, which CI logs are full of) and shows every other control
// character in caret notation (^[ for ESC), C1 controls as U+FFFD, and a
// lone carriage return as a newline. It keeps state across writes, since
// a sequence or a character may be split between two.
//
// A style holds to the end of its line:
// at a newline, and at the end, one that a colour sequence set is reset,
// so that no sequence (ESC [ 8 m, concealed) hides the lines after it,
// the CLI's own among them. plain shows colour sequences too: for text
// that has no use for them (a test report's names and messages).
type termSafe struct {
	w       io.Writer
	plain   bool
	styled  bool   // a colour sequence passed since the last newline
	pending []byte // an unfinished escape sequence or UTF-8 character
}

// reset ends any style a colour sequence set.
const reset = "\x1b[0m"

// maxSGR bounds the escape sequence held back: longer is not a colour.
const maxSGR = 32

// logOutput is out, made safe when it is a terminal (a file or a pipe
// gets the bytes as the log has them).
func logOutput(out *os.File) io.Writer {
	if fi, err := out.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return &termSafe{w: out}
	}
	return out
}

func (t *termSafe) Write(p []byte) (int, error) {
	buf := append(t.pending, p...)
	out := make([]byte, 0, len(buf)+16)
	i := 0
	for i < len(buf) {
		n, emit, more := t.next(buf[i:])
		if more {
			break // the rest may complete with the next write
		}
		out = append(out, emit...)
		i += n
	}
	t.pending = append([]byte(nil), buf[i:]...)
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held back, made safe as it stands: the start of
// an escape sequence in caret notation, a carriage return as a newline,
// the bytes of an unfinished character as U+FFFD.
func (t *termSafe) Flush() error {
	var out []byte
	for _, b := range t.pending {
		switch {
		case b == '\r':
			out = append(out, '\n')
		case b >= utf8.RuneSelf:
			out = append(out, "\uFFFD"...)
		default:
			out = append(out, caret(b)...)
		}
	}
	t.pending = nil
	if t.styled {
		out, t.styled = append(out, reset...), false
	}
	_, err := t.w.Write(out)
	return err
}

// newline is a line's end, after a reset if the line set a style.
func (t *termSafe) newline(n int) (int, []byte, bool) {
	if t.styled {
		t.styled = false
		return n, []byte(reset + "\n"), false
	}
	return n, []byte("\n"), false
}

// next reads one unit at the start of b: how many bytes it takes, what to
// print for them, or more when b ends before the unit does.
func (t *termSafe) next(b []byte) (n int, emit []byte, more bool) {
	c := b[0]
	switch {
	case c == 0x1b:
		n, emit, more := escape(b)
		if !more && emit[0] == 0x1b { // a colour
			if t.plain {
				return 1, caret(0x1b), false
			}
			// ESC [ m and ESC [ 0 m reset; anything else sets a style.
			t.styled = strings.Trim(string(emit[2:len(emit)-1]), "0;") != ""
		}
		return n, emit, more
	case c == '\r':
		if len(b) == 1 {
			return 0, nil, true
		}
		if b[1] == '\n' {
			return t.newline(2)
		}
		return t.newline(1)
	case c == '\n':
		return t.newline(1)
	case c == '\t':
		return 1, b[:1], false
	case c < 0x20 || c == 0x7f:
		return 1, caret(c), false
	case c < utf8.RuneSelf:
		return 1, b[:1], false
	}
	if !utf8.FullRune(b) {
		return 0, nil, true
	}
	r, size := utf8.DecodeRune(b)
	if r == utf8.RuneError || (r >= 0x80 && r <= 0x9f) {
		return size, []byte("\uFFFD"), false
	}
	return size, b[:size], false
}

// escape passes a colour (ESC [ digits and semicolons m) and shows any
// other ESC as ^[ (the bytes after it are then plain text).
func escape(b []byte) (n int, emit []byte, more bool) {
	for i := 1; i < len(b) && i < maxSGR; i++ {
		c := b[i]
		switch {
		case i == 1 && c == '[':
		case i > 1 && (c >= '0' && c <= '9' || c == ';'):
		case i > 1 && c == 'm':
			return i + 1, b[:i+1], false
		default:
			return 1, caret(0x1b), false
		}
	}
	if len(b) < maxSGR {
		return 0, nil, true
	}
	return 1, caret(0x1b), false
}

// caret is a control character in caret notation (^[ for ESC, ^? for DEL).
func caret(c byte) []byte {
	if c == 0x7f {
		return []byte("^?")
	}
	if c < 0x20 {
		return []byte{'^', c + 0x40}
	}
	return []byte{c}
}

// safeLog runs fn with where a job's log is printed (stdout, made safe
// when it is a terminal), and flushes it after.
func safeLog(fn func(out io.Writer) error) error {
	out := logOutput(os.Stdout)
	err := fn(out)
	if t, ok := out.(*termSafe); ok {
		if ferr := t.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// plainText is s with every control character shown: C0 and DEL in caret
// notation (but newlines and tabs when keep says so), C1, format
// characters and bytes that are not UTF-8 as U+FFFD. For what the CLI prints that has no use for
// controls: a server's strings (a job's name is the pipeline's text) in
// its messages, and table cells, where a tab or a newline would also
// forge a column or a row.
func plainText(s string, keep bool) string {
	clean := func(r rune) bool { return printable(r) || keep && (r == '\n' || r == '\t') }
	if !strings.ContainsFunc(s, func(r rune) bool { return !clean(r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case clean(r):
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.Write(caret(byte(r)))
		default:
			b.WriteString("\uFFFD")
		}
	}
	return b.String()
}

// printable says r is no control character (C0, DEL, C1), no format
// character (Unicode's Cf: bidi overrides and isolates, which reorder
// what follows them, zero-width characters) and no undecodable byte
// (U+FFFD as range reads it).
func printable(r rune) bool {
	return r >= 0x20 && r != 0x7f && (r < 0x80 || r > 0x9f) && r != utf8.RuneError && !unicode.Is(unicode.Cf, r)
}

// cell is v as a table cell: plain text on one line.
func cell(v any) string { return plainText(fmt.Sprint(v), false) }

// printf prints the CLI's messages on stdout as plain text (plainText).
func printf(format string, args ...any) {
	fmt.Fprint(os.Stdout, plainText(fmt.Sprintf(format, args...), true))
}
