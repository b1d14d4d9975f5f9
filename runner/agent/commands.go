package agent

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// addMaskCommand starts a line of a step's output that asks the runner to
// mask a value from then on, as GitHub's workflow command does: the rest
// of the line, with %25, %0D and %0A for %, CR and LF. Leading spaces and
// tabs are allowed, as GitHub's.
const addMaskCommand = "::add-mask::"

var addMaskBytes = []byte(addMaskCommand)

// maxCommandLine bounds an ::add-mask:: line held until its end; a longer
// one is dropped, whole.
const maxCommandLine = 64 << 10

// commandFilter passes a step's output on to the log, acting on the
// ::add-mask:: lines: the value is masked before anything after the line
// is written, and the line is replaced by one that says so, so the value
// never reaches the log through it. Only the start of a line is held,
// while it may still be the command's, so output without line ends (a
// progress bar) still flows.
type commandFilter struct {
	dst     io.Writer
	addMask func(string) error
	held    []byte // the start of the line, while it may be a command
	blanks  int    // the spaces and tabs held at its start
	command bool   // held is a command's line, up to its end
	passing bool   // the rest of the line is plain output
	dropped bool   // the command's line passed maxCommandLine
}

func newCommandFilter(dst io.Writer, addMask func(string) error) *commandFilter {
	return &commandFilter{dst: dst, addMask: addMask}
}

func (f *commandFilter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		switch {
		case f.passing:
			end := f.plainSpan(p)
			_, _ = f.dst.Write(p[:end])
			p = p[end:]
		case f.command:
			i := bytes.IndexByte(p, '\n')
			end := len(p)
			if i >= 0 {
				end = i
			}
			if len(f.held)+end > maxCommandLine {
				f.dropped = true
			} else {
				f.held = append(f.held, p[:end]...)
			}
			if i < 0 {
				return n, nil
			}
			p = p[i+1:]
			f.runCommand()
		default:
			p = f.lineStart(p)
		}
	}
	return n, nil
}

// plainSpan is how much of p, which continues a line of plain output, is
// plain output too: up to the start of a line that may be a command (or
// whose start p does not hold whole), where passing ends. Output goes on
// in writes as large as the step's.
func (f *commandFilter) plainSpan(p []byte) int {
	i := 0
	for {
		nl := bytes.IndexByte(p[i:], '\n')
		if nl < 0 {
			return len(p)
		}
		i += nl + 1
		k := i
		for k < len(p) && (p[k] == ' ' || p[k] == '\t') {
			k++
		}
		if rest := p[k:min(len(p), k+len(addMaskCommand))]; k-i >= maxCommandLine || k < len(p) && !bytes.HasPrefix(addMaskBytes, rest) {
			continue
		}
		f.passing = false
		return i
	}
}

// lineStart takes the bytes of p that decide whether the line is a
// command, and returns the rest.
func (f *commandFilter) lineStart(p []byte) []byte {
	for len(p) > 0 {
		c, body := p[0], len(f.held)-f.blanks
		switch {
		case body == 0 && (c == ' ' || c == '\t') && f.blanks < maxCommandLine:
			f.held, f.blanks = append(f.held, c), f.blanks+1
		case body < len(addMaskCommand) && c == addMaskCommand[body]:
			f.held = append(f.held, c)
			if body+1 == len(addMaskCommand) {
				f.command = true
				return p[1:]
			}
		default:
			_, _ = f.dst.Write(f.held)
			f.held, f.blanks, f.passing = f.held[:0], 0, true
			return p
		}
		p = p[1:]
	}
	return p
}

// runCommand masks the value of the ::add-mask:: line held, and writes
// the line that stands for it.
func (f *commandFilter) runCommand() {
	line := strings.TrimSuffix(string(f.held), "\r")
	value := unescapeCommandData(line[strings.Index(line, addMaskCommand)+len(addMaskCommand):])
	dropped := f.dropped
	f.held, f.blanks, f.command, f.dropped = f.held[:0], 0, false, false
	switch {
	case dropped:
		fmt.Fprintf(f.dst, "%s*** (not masked: the line is over %d bytes; it is left out)\n", addMaskCommand, maxCommandLine)
	case value == "":
		fmt.Fprintf(f.dst, "%s (nothing to mask)\n", addMaskCommand)
	default:
		if err := f.addMask(value); err != nil {
			fmt.Fprintf(f.dst, "%s*** (not masked: %v; the line is left out)\n", addMaskCommand, err)
			return
		}
		fmt.Fprintf(f.dst, "%s***\n", addMaskCommand)
	}
}

// Close ends the output: a line begun is written, or run if a command's.
func (f *commandFilter) Close() {
	if f.command {
		f.runCommand()
		return
	}
	_, _ = f.dst.Write(f.held)
	f.held, f.blanks = f.held[:0], 0
}

// unescapeCommandData undoes GitHub's escaping of a command's data.
func unescapeCommandData(s string) string {
	return strings.NewReplacer("%0D", "\r", "%0A", "\n", "%25", "%").Replace(s)
}
