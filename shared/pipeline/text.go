package pipeline

import (
	"fmt"
	"unicode/utf8"
)

// Three loops of go-yaml's lexer are quadratic in plain text, whatever the
// YAML around it. checkText bounds them on the bytes alone, so that no
// reading of the YAML can be wrong about them. The costs are allowed per
// byte of the file (counted as at least 32 KiB), like checkTokens' budgets:
const (
	// Every '<' of a run re-counts the rest of the run (a merge key "<<"
	// is looked for): a run of n costs n²/2 steps.
	maxLessRun = 256
	// A tab in a double-quoted scalar reads the rest of its line: tabs
	// times line length, summed over lines. 16M steps at 256 KiB: a line
	// 16 KiB long holding 1,000 tabs.
	tabCostPerByte = 64
	// Each blank line that ends a block scalar copies the scalar (twice,
	// as a string and as runes): blank lines in a row times the bytes
	// before them. In a file of 256 KiB, 16 in a row at its end (200
	// after its first 20 KiB); in one of 32 KiB or less, 25 after 20 KiB.
	blankCostPerByte = 16
)

// checkText refuses what is not UTF-8 and the text that would make
// go-yaml's lexer quadratic; the message says what and where.
func checkText(file string, src []byte) *Error {
	line, col := 1, 1
	fail := func(format string, args ...any) *Error {
		return &Error{File: file, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
	}
	budget := max(len(src), minBudgetBytes)
	lessRun, tabs, tabCost := 0, 0, 0
	lineStart, blank, blanks, blankStart := 0, true, 0, 0
	for i := 0; i <= len(src); {
		if i == len(src) || src[i] == '\n' || src[i] == '\r' {
			if tabCost += tabs * (i - lineStart); tabCost > tabCostPerByte*budget {
				return fail("too many tabs on long lines (go-yaml reads the rest of the line at each tab in a quoted string)")
			}
			if !blank {
				blanks = 0
			} else if blanks++; blanks == 1 {
				blankStart = lineStart
			}
			if blanks*blankStart > blankCostPerByte*budget {
				return fail("%d blank lines in a row at this point of a file this size: at most %d (go-yaml's work for the blank lines that end a block scalar grows with their number times the bytes before them)", blanks, blankCostPerByte*budget/blankStart)
			}
			if i == len(src) {
				return nil
			}
			if src[i] == '\r' && i+1 < len(src) && src[i+1] == '\n' {
				i++
			}
			i++
			line, col, lineStart, blank, tabs, lessRun = line+1, 1, i, true, 0, 0
			continue
		}
		c, w := utf8.DecodeRune(src[i:])
		switch {
		case c == utf8.RuneError && w == 1:
			return fail("the file is not valid UTF-8")
		case c == '<':
			if lessRun++; lessRun > maxLessRun {
				return fail("more than %d '<' in a row", maxLessRun)
			}
		case c == '\t':
			tabs++
		}
		if c != '<' {
			lessRun = 0
		}
		if c != ' ' && c != '\t' {
			blank = false
		}
		i += w
		col++
	}
	return nil
}
