package agent

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
)

// The workflow commands the runner acts on, as GitHub's, each a line of a
// step's output (leading spaces and tabs allowed; a line ends at LF, CR
// or CRLF, as GitHub reads them):
//
//   - ::add-mask::VALUE masks VALUE from then on (%25, %0D and %0A for %,
//     CR and LF);
//   - ::stop-commands::TOKEN stops acting on other commands until a line
//     ::TOKEN::. ::add-mask:: is acted on even then (GitHub's is not): text
//     a step does not control that stops commands must not make a later
//     honest ::add-mask:: print its value, and a mask too many only hides.
//
// Other commands (::group::, ::error::...) are printed as they are.
const (
	addMaskCommand      = "::add-mask::"
	stopCommandsCommand = "::stop-commands::"
)

// maxCommandLine bounds a command's line held until its end; a longer one
// is dropped, whole. A line that starts with more blanks is plain output.
const maxCommandLine = 64 << 10

// commandFilter passes a step's output on to the log, acting on the
// commands above: an ::add-mask:: value is masked before anything after
// its line is written, and the line is replaced by one that says so, so
// the value never reaches the log through it. Only the start of a line is
// held, while it may still be a command's, so output without line ends (a
// progress bar) still flows, in writes as large as the step's.
type commandFilter struct {
	mu      sync.Mutex
	dst     io.Writer
	addMask func(string) error
	// refused is called when a value could not be masked.
	refused func()
	held    []byte // the start of the line, while it may be a command
	blanks  int    // the spaces and tabs held at its start
	command string // the command whose line held is, up to its end
	passing bool   // the rest of the line is plain output
	dropped bool   // the command's line passed maxCommandLine
	skipLF  bool   // the command's line ended at CR: an LF next is its end too
	resume  string // "::TOKEN::" while commands are stopped, else ""
}

func newCommandFilter(dst io.Writer, addMask func(string) error, refused func()) *commandFilter {
	return &commandFilter{dst: dst, addMask: addMask, refused: refused}
}

// commands are the command prefixes a line may start with now.
func (f *commandFilter) commands() []string {
	if f.resume != "" {
		return []string{f.resume, addMaskCommand}
	}
	return []string{addMaskCommand, stopCommandsCommand}
}

// mayStart reports whether b may begin one of the commands now.
func (f *commandFilter) mayStart(b []byte) bool {
	s := string(b)
	for _, c := range f.commands() {
		if strings.HasPrefix(c, s) || strings.HasPrefix(s, c) {
			return true
		}
	}
	return false
}

func (f *commandFilter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(p)
	if f.skipLF && len(p) > 0 {
		if p[0] == '\n' {
			p = p[1:]
		}
		f.skipLF = false
	}
	for len(p) > 0 {
		switch {
		case f.passing:
			end := f.plainSpan(p)
			_, _ = f.dst.Write(p[:end])
			p = p[end:]
		case f.command != "":
			p = f.commandLine(p)
		default:
			p = f.lineStart(p)
		}
	}
	return n, nil
}

// plainSpan is how much of p, which continues a line of plain output, is
// plain output too: up to the start of a line that may be a command (or
// whose start p does not hold whole), where passing ends.
func (f *commandFilter) plainSpan(p []byte) int {
	i := 0
	for {
		nl := bytes.IndexAny(p[i:], "\r\n")
		if nl < 0 {
			return len(p)
		}
		i += nl + 1
		k := i
		for k < len(p) && (p[k] == ' ' || p[k] == '\t') {
			k++
		}
		if k-i >= maxCommandLine || k < len(p) && !f.mayStart(p[k:min(len(p), k+len(addMaskCommand))]) {
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
		c := p[0]
		body := f.held[f.blanks:]
		switch {
		case len(body) == 0 && (c == ' ' || c == '\t') && f.blanks+1 < maxCommandLine:
			f.held, f.blanks = append(f.held, c), f.blanks+1
		case c != '\r' && c != '\n' && f.mayStart(append(body, c)):
			f.held = append(f.held, c)
			for _, cmd := range f.commands() {
				if string(f.held[f.blanks:]) == cmd {
					f.command = cmd
					return p[1:]
				}
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

// commandLine takes the rest of a command's line from p, runs the command
// at its end, and returns what follows.
func (f *commandFilter) commandLine(p []byte) []byte {
	i := bytes.IndexAny(p, "\r\n")
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
		return nil
	}
	if p[i] == '\r' {
		if i+1 < len(p) && p[i+1] == '\n' {
			i++
		} else if i+1 == len(p) {
			f.skipLF = true
		}
	}
	f.runCommand()
	return p[i+1:]
}

// runCommand acts on the command whose line is held.
func (f *commandFilter) runCommand() {
	cmd, data, dropped := f.command, string(f.held[f.blanks+len(f.command):]), f.dropped
	f.held, f.blanks, f.command, f.dropped = f.held[:0], 0, "", false
	switch {
	case cmd == f.resume:
		f.resume = ""
		fmt.Fprintf(f.dst, "%s\n", cmd)
	case cmd == stopCommandsCommand && !dropped && data != "":
		f.resume = "::" + data + "::"
		fmt.Fprintf(f.dst, "%s%s\n", cmd, data)
	case cmd == stopCommandsCommand:
		fmt.Fprintf(f.dst, "%s (not stopped: no token, or a line over %d bytes)\n", cmd, maxCommandLine)
	case dropped:
		f.refused()
		fmt.Fprintf(f.dst, "%s*** (not masked: the line is over %d bytes; it is left out)\n", cmd, maxCommandLine)
	case data == "":
		fmt.Fprintf(f.dst, "%s (nothing to mask)\n", cmd)
	default:
		if err := f.addMask(unescapeCommandData(data)); err != nil {
			f.refused()
			fmt.Fprintf(f.dst, "%s*** (not masked: %v; the line is left out)\n", cmd, err)
			return
		}
		fmt.Fprintf(f.dst, "%s***\n", cmd)
	}
}

// Flush ends what is held when the step has ended but something it left
// running still holds its output open: a command's line is run as far as
// it was written (as GitHub does at the end of a step's output), the
// start of a plain one written. What comes after on that line is plain.
func (f *commandFilter) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.command != "" {
		f.runCommand()
		f.passing = true
		return
	}
	if len(f.held) > 0 {
		_, _ = f.dst.Write(f.held)
		f.held, f.blanks, f.passing = f.held[:0], 0, true
	}
}

// unescapeCommandData undoes GitHub's escaping of a command's data.
func unescapeCommandData(s string) string {
	return strings.NewReplacer("%0D", "\r", "%0A", "\n", "%25", "%").Replace(s)
}
