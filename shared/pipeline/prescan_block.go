package pipeline

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The block scalars of prescan: go-yaml's scanMultiLineHeader and
// scanMultiLine.

// scanBlockHeader reads '|' or '>' with its options and comment; the lines
// after it are the block scalar's, until one is indented no further than
// the last key or '-' (scanMultiLine).
func (s *prescanner) scanBlockHeader() bool {
	end := s.i + 1
	for end < len(s.src) && s.src[end] != '\n' && !(s.src[end] == '\r' && (end+1 >= len(s.src) || s.src[end+1] != '\n')) {
		end++
	}
	raw := s.src[s.i+1 : end]
	hasComment := strings.IndexByte(string(raw), '#') >= 0
	progress := utf8.RuneCount(raw) // go-yaml stops on the line break
	if end == len(s.src) && progress > 0 {
		// At the end of the file go-yaml stops on the last character
		// and leaves it out of the options.
		_, w := utf8.DecodeLastRune(raw)
		raw, progress = raw[:len(raw)-w], progress-1
	}
	value := strings.TrimRight(strings.TrimSuffix(string(raw), "\r"), " ")
	opt := value
	comment := strings.Index(value, "#")
	if comment > 0 {
		opt = value[:comment]
	}
	opt = strings.TrimRight(opt, " \t")
	indent, ok := blockIndent(opt)
	s.i++ // go-yaml skips the indicator without counting a column
	if !ok {
		s.advance(progress, progress)
		s.lexError()
		return true
	}
	if s.col == 1 {
		s.lastDelim = 1
	}
	s.emit(tokOther, s.col)
	if hasComment {
		s.emit(tokOther, s.col)
	}
	s.multi = &multiLine{optIndent: indent, headerCol1: s.col == 1 && !hasComment,
		keep:  strings.HasPrefix(opt, "+") || strings.HasSuffix(opt, "+"),
		strip: strings.HasPrefix(opt, "-") || strings.HasSuffix(opt, "-")}
	if indent > 0 {
		s.multi.firstIndentCol = s.lastDelim + indent
	}
	s.state = indentKeep
	s.resetBuffer()
	s.advance(progress, progress)
	s.advance(1, 0) // the line break, or the last character
	s.newLine()
	return true
}

// blockIndent validates a block scalar header's options (go-yaml's
// validateMultiLineHeaderOption) and returns its indentation indicator.
func blockIndent(opt string) (int, bool) {
	opt = strings.TrimPrefix(opt, "-")
	opt = strings.TrimPrefix(opt, "+")
	opt = strings.TrimSuffix(opt, "-")
	opt = strings.TrimSuffix(opt, "+")
	if opt == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(opt, 10, 64)
	if err != nil || n > 9 || opt == "0" {
		return 0, false // go-yaml takes "-0", and "-3" as -3
	}
	return int(n), true
}

// scanMultiLine is one character inside a block scalar: only line breaks,
// indentation and go-yaml's indentation errors matter.
func (s *prescanner) scanMultiLine(c rune) {
	m := s.multi
	if c == '\r' && s.next(1) == '\n' {
		s.i++
		c = '\n'
	}
	if _, w := utf8.DecodeRune(s.src[s.i:]); s.i+w >= len(s.src) { // the last character
		m.indentCol(s.col)
		if m.optIndent != 0 && m.firstIndentCol > m.lineIndentCol {
			s.advance(1, 1)
			s.lexError()
			return
		}
		s.emit(tokString, s.col)
		s.clear()
		s.advance(1, 1)
		return
	}
	switch {
	case c == '\n' || c == '\r':
		if m.firstIndentCol == 0 {
			m.spaceOnlyCol = s.col - 1
		}
		m.lineIndentCol = 0
		m.add('\n')
		s.advance(1, 0)
		s.newLine()
		if s.documentMarkerAhead() {
			s.emit(tokString, s.col)
			s.clear()
		}
		return
	case s.firstChar && c == ' ':
		if m.firstIndentCol != 0 && s.col >= m.firstIndentCol {
			m.add(' ') // indentation beyond the scalar's own
		}
	case s.firstChar && c == '\t' && m.isIndentCol(s.col):
		s.advance(1, 1)
		s.lexError()
		return
	case c == '\t' && !m.isIndentCol(s.col):
		m.add('\t')
	default:
		if m.firstIndentCol == 0 && m.spaceOnlyCol > s.col {
			s.advance(1, 1)
			s.lexError()
			return
		}
		m.indentCol(s.col)
		if m.optIndent != 0 && m.firstIndentCol > m.lineIndentCol {
			s.advance(1, 1)
			s.lexError()
			return
		}
		if m.firstIndentCol > 1 {
			s.lastDelim = m.firstIndentCol - 1
		}
		m.add(c)
	}
	s.advance(1, 1)
}

// endBlock is a line indented no further than the last key or '-': the
// block scalar ends. go-yaml makes its string (and may then refuse it),
// so two tokens are counted. When chomping leaves the string empty, go-yaml
// makes none and its buffer keeps a stale length: it reads as holding a
// plain scalar until the next character is written to it.
func (s *prescanner) endBlock() {
	m := s.multi
	s.multi, s.saved = nil, false
	s.emit(tokString, s.col)
	s.emit(tokOther, s.col)
	s.resetBuffer()
	if m.buffered && m.empty() && !m.headerCol1 {
		s.buf, s.stale = true, true
	}
}

// add records a character go-yaml writes to a block scalar's buffer.
// shape follows the spaces (S) and line breaks (N) of a buffer without
// text through the states of S*N* | NS*N*, what strip chomping empties:
// 0 nothing, 1 S+, 2 S+N+, 3 N, 4 NS+, 5 NN+, 6 NS+N+, -1 neither.
func (m *multiLine) add(c rune) {
	m.buffered = true
	if c != ' ' && c != '\n' {
		m.text = true
		return
	}
	switch {
	case m.shape < 0:
	case c == ' ':
		m.shape = afterSpace[m.shape]
	default:
		m.shape = afterLineBreak[m.shape]
	}
	m.spaces = m.spaces || c == ' '
}

var (
	afterSpace     = [7]int{1, 1, -1, 4, 4, -1, -1}
	afterLineBreak = [7]int{3, 2, 2, 5, 6, 5, 6}
)

// empty says whether chomping leaves nothing of the buffer (go-yaml's
// bufferedSrc for a block scalar).
func (m *multiLine) empty() bool {
	switch {
	case m.text || m.keep:
		return false
	case m.strip:
		return m.shape >= 0
	}
	return !m.spaces // clip keeps one line break, then drops a lone one
}

func (m *multiLine) indentCol(col int) {
	if m.firstIndentCol == 0 {
		m.firstIndentCol = col
	}
	if m.lineIndentCol == 0 {
		m.lineIndentCol = col
	}
}

func (m *multiLine) isIndentCol(col int) bool {
	if m.firstIndentCol == 0 {
		return col == 1
	}
	return m.firstIndentCol > col
}
