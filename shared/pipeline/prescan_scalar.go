package pipeline

import "unicode/utf8"

// The scalars, comments, tags and line breaks of prescan, each mirroring
// the go-yaml function of the same name.

func (s *prescanner) scanComment() bool {
	if s.buf {
		if p := s.src[s.i-1]; p != ' ' && p != '\t' && p != '\n' && p != '\r' {
			return false // part of a plain scalar, as in a#b
		}
	}
	s.flush()
	s.i++ // go-yaml skips '#' without counting a column
	end := s.i
	for end < len(s.src) && s.src[end] != '\n' && s.src[end] != '\r' {
		end++
	}
	n := utf8.RuneCount(s.src[s.i:end])
	s.emit(tokOther, s.col)
	s.advance(n, n)
	s.advance(1, 0) // only the first character of a line break
	s.newLine()
	s.clear()
	return true
}

// scanTag reads '!' and the tag name up to a space, a line break, or a ','
// in a flow collection.
func (s *prescanner) scanTag() bool {
	s.i++ // '!', without a column
	n := 0
	for j := s.i; j < len(s.src); n++ {
		c, w := utf8.DecodeRune(s.src[j:])
		switch {
		case c == ' ':
			s.emit(tokOther, s.col)
			s.advance(n+1, n+1) // go-yaml steps over the space too
			s.clear()
			return true
		case (c == ',' && s.flowMode()) || c == '\n' || c == '\r':
			s.emit(tokOther, s.col)
			s.advance(n, n)
			s.clear()
			return true
		case c == '{' || c == '}':
			s.advance(n+1, n+1)
			s.lexError()
			return true
		}
		j += w
	}
	s.advance(n, n)
	s.clear()
	return true
}

func (s *prescanner) scanNewLine(c rune) {
	if s.bufRunes > 0 && !s.saved {
		s.savedCol, s.saved = s.col-s.bufNonSpace, true
	}
	s.bufRunes = s.bufNonSpace // trailing spaces are dropped
	if !s.obufText {
		s.obuf = s.i // and an origin buffer of spaces is emptied
	}
	if c == '\r' && s.next(1) == '\n' {
		s.i++
	}
	if s.i+1 >= len(s.src) || s.anchor || s.alias || s.directive {
		s.flush()
	}
	if s.bufRunes > 0 {
		s.bufRunes++ // the line break, as a space or '\n'
	}
	s.advance(1, 0)
	s.newLine()
}

func (s *prescanner) scanWhiteSpace() bool {
	switch {
	case s.firstChar:
		s.advance(1, 1)
	case s.directive:
		s.flush()
		s.advance(1, 1)
	case s.anchor || s.alias:
		s.flush() // ends the name; go-yaml then reads the space again
		s.anchor, s.alias = false, false
	default:
		return false
	}
	return true
}

func (s *prescanner) scanTab() bool {
	if s.lastDelim < s.col || (s.buf && s.lastDelim == 0) {
		s.indentNum++
		s.advance(1, 0) // go-yaml counts no column for this tab
		return true
	}
	if s.flowMode() || !s.firstChar {
		return false
	}
	s.advance(1, 1)
	s.lexError()
	return true
}

func (s *prescanner) scanQuote(c rune) bool {
	col := s.col
	ok := false
	if c == '\'' {
		ok = s.singleQuoted()
	} else {
		ok = s.doubleQuoted()
	}
	if ok {
		s.emit(tokQuoted, col)
		s.clear()
	}
	return true
}

// quotedLineBreak steps over a line break inside a quoted scalar; false
// means go-yaml refuses the document marker that starts the next line.
func (s *prescanner) quotedLineBreak() bool {
	s.advance(1, 0)
	s.newLine()
	return s.i >= len(s.src) || !s.documentMarkerAhead()
}

// quotedBlank steps over what both quoted styles treat alike: a line
// break, and a space or tab at the start of a continuation line. blank says
// c was one of them; ok false means go-yaml refuses a tab there.
func (s *prescanner) quotedBlank(c rune, lineStart *bool) (blank, ok bool) {
	switch {
	case c == '\n' || c == '\r':
		*lineStart = true
		return true, s.quotedLineBreak()
	case *lineStart && (c == ' ' || c == '\t'):
		if c == '\t' && s.lastDelim >= s.col {
			return true, false
		}
		s.advance(1, 1)
		return true, true
	}
	return false, true
}

func (s *prescanner) singleQuoted() bool {
	lineStart := false
	s.advance(1, 1)
	for s.i < len(s.src) {
		c, _ := utf8.DecodeRune(s.src[s.i:])
		if blank, ok := s.quotedBlank(c, &lineStart); !ok {
			return s.quotedError(0)
		} else if blank {
			continue
		}
		switch {
		case c != '\'':
			lineStart = false
		case s.next(1) == '\'':
			s.advance(1, 1) // '' is a quote
		default:
			s.advance(1, 1)
			return true
		}
		s.advance(1, 1)
	}
	s.lexError()
	return false
}

// doubleQuoted keeps go-yaml's drift: a tab followed on its line by more
// than spaces (and not directly by the closing quote) moves go-yaml's
// position one character further than its loop, so that many characters
// after the closing quote are skipped unread.
func (s *prescanner) doubleQuoted() bool {
	lineStart, drift := false, 0
	s.advance(1, 1)
	for s.i < len(s.src) {
		c, _ := utf8.DecodeRune(s.src[s.i:])
		if blank, ok := s.quotedBlank(c, &lineStart); !ok {
			return s.quotedError(drift)
		} else if blank {
			continue
		}
		switch {
		case c == '\\':
			lineStart = false
			switch s.escape() {
			case escapeBad:
				return s.quotedError(drift)
			case escapeLineBreak:
				lineStart = true
				continue
			}
		case c == '\t':
			if s.nonSpaceAhead() {
				if s.next(1) != '"' {
					drift++
					s.col++
				}
			} else {
				n := s.lineEnd - s.i - 1
				s.advance(n, n)
			}
		case c != '"':
			lineStart = false
		default:
			s.advance(1, 1)
			s.advance(drift, 0)
			return true
		}
		s.advance(1, 1)
	}
	return s.quotedError(drift)
}

func (s *prescanner) quotedError(drift int) bool {
	s.advance(drift, 0)
	s.lexError()
	return false
}

type escapeResult int

const (
	escapeOK escapeResult = iota
	escapeBad
	escapeLineBreak
)

// escape steps over a backslash escape, leaving the position on its last
// character (or after a line break), as go-yaml does.
func (s *prescanner) escape() escapeResult {
	next, ok := s.runeAt(1)
	if !ok {
		return escapeOK // a trailing backslash: the quote is unterminated
	}
	progress := 1
	switch next {
	case '0', 'a', 'b', 't', 'n', 'v', 'f', 'r', 'e', ' ', '"', '/', '\\', 'N', '_', 'L', 'P', '\t':
	case 'x':
		if _, ok := s.runeAt(3); ok {
			progress = 3
		}
	case 'u':
		if _, ok := s.runeAt(5); !ok {
			return escapeBad
		}
		progress = 5
		if high := s.hexAt(2, 4); high >= 0xD800 && high <= 0xDBFF {
			if _, ok := s.runeAt(11); !ok {
				return escapeBad
			}
			if b, _ := s.runeAt(6); b != '\\' {
				return escapeBad
			}
			if u, _ := s.runeAt(7); u != 'u' {
				return escapeBad
			}
			if low := s.hexAt(8, 4); low < 0xDC00 || low > 0xDFFF {
				return escapeBad
			}
			progress += 6
		}
	case 'U':
		if _, ok := s.runeAt(9); !ok {
			return escapeBad
		}
		progress = 9
	case '\n':
		s.advance(1, 1)
		s.advance(1, 0)
		s.newLine()
		return escapeLineBreak
	case '\r':
		if c, _ := s.runeAt(2); c == '\n' {
			progress = 2
		}
		s.advance(1, 0)
		s.newLine()
		s.advance(progress, progress)
		return escapeLineBreak
	default:
		s.advance(1, 1)
		return escapeBad
	}
	s.advance(progress, progress)
	return escapeOK
}

// hexAt is go-yaml's hexRunesToInt of the n characters k ahead, including
// its value for characters that are not hex digits.
func (s *prescanner) hexAt(k, n int) int {
	sum := 0
	for j := 0; j < n; j++ {
		b, _ := s.runeAt(k + j)
		d := int(b) - '0'
		switch {
		case b >= 'A' && b <= 'F':
			d = int(b) - 'A' + 10
		case b >= 'a' && b <= 'f':
			d = int(b) - 'a' + 10
		}
		sum += d << (uint(n-j-1) * 4)
	}
	return sum
}

// nonSpaceAhead says whether the rest of the current line holds more than
// spaces and tabs; it reads each line once.
func (s *prescanner) nonSpaceAhead() bool {
	if s.i >= s.lineEnd {
		s.lineEnd, s.lineWS = s.i, s.i
		for s.lineEnd < len(s.src) && s.src[s.lineEnd] != '\n' && s.src[s.lineEnd] != '\r' {
			if c := s.src[s.lineEnd]; c != ' ' && c != '\t' {
				s.lineWS = s.lineEnd
			}
			s.lineEnd++
		}
	}
	return s.lineWS > s.i
}
