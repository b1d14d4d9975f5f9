package pipeline

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The position and buffer of prescan.

// advance steps over n characters and counts cols columns.
func (s *prescanner) advance(n, cols int) {
	for ; n > 0 && s.i < len(s.src); n-- {
		c, w := utf8.DecodeRune(s.src[s.i:])
		s.i += w
		s.obufText = s.obufText || (c != ' ' && c != '\t')
	}
	s.col += cols
}

func (s *prescanner) newLine() {
	s.line++
	s.col = 1
	s.indentNum = 0
	s.firstChar = true
	s.anchor, s.alias, s.directive = false, false, false
}

// runeAt is the character k after the current one.
func (s *prescanner) runeAt(k int) (rune, bool) {
	j := s.i
	for ; k > 0 && j < len(s.src); k-- {
		_, w := utf8.DecodeRune(s.src[j:])
		j += w
	}
	if j >= len(s.src) {
		return 0, false
	}
	c, _ := utf8.DecodeRune(s.src[j:])
	return c, true
}

// next is the first byte of the character k after the current one, 0 at
// the end (as go-yaml's nextChar).
func (s *prescanner) next(k int) byte {
	c, ok := s.runeAt(k)
	switch {
	case !ok:
		return 0
	case c >= utf8.RuneSelf:
		return 0xff // no ASCII character this is compared with
	}
	return byte(c)
}

// repeat is go-yaml's repeatNum for '.', '-' and '<', where only 2 and 3
// matter: it never counts further than 4.
func (s *prescanner) repeat(c byte) int {
	n := 0
	for n < 4 && s.i+n < len(s.src) && s.src[s.i+n] == c {
		n++
	}
	return n
}

func (s *prescanner) isMergeKey() bool {
	if s.repeat('<') != 2 {
		return false
	}
	for j := s.i + 2; j < len(s.src); j++ {
		switch c := s.src[j]; {
		case c == ' ':
		case c != ':':
			return false
		case j+1 < len(s.src) && (s.src[j+1] == ' ' || s.src[j+1] == '\n' || s.src[j+1] == '\r'):
			return true
		}
	}
	return false
}

func (s *prescanner) documentMarkerAhead() bool {
	rest := s.src[s.i:]
	if len(rest) < 3 || (string(rest[:3]) != "---" && string(rest[:3]) != "...") {
		return false
	}
	return len(rest) == 3 || strings.IndexByte(" \t\n\r", rest[3]) >= 0
}

func (s *prescanner) flowMode() bool { return s.flowSeq > 0 || s.flowMap > 0 }

// obufStartsWithTab is go-yaml's test that refuses a tab before '-' or a
// key's ':' (its origin buffer, less one leading space, starts with one).
func (s *prescanner) obufStartsWithTab() bool {
	o := s.src[min(s.obuf, s.i):s.i]
	if len(o) > 0 && o[0] == ' ' {
		o = o[1:]
	}
	return len(o) > 0 && o[0] == '\t'
}

func (s *prescanner) addBuf(c rune) {
	if (!s.buf || s.stale) && (c == ' ' || c == '\t') {
		return
	}
	if s.stale {
		s.stale, s.bufRunes = false, 0
	}
	s.bufRunes++
	if c != ' ' && c != '\t' {
		s.buf = true
		s.bufNonSpace = s.bufRunes
	}
}

// bufCol is the column go-yaml gives the buffered scalar.
func (s *prescanner) bufCol() int {
	if s.saved {
		return s.savedCol
	}
	return s.col - s.bufRunes
}

// flush makes the buffered scalar a token, if there is one.
func (s *prescanner) flush() {
	s.saved = false
	switch {
	case s.multi != nil:
		s.emit(tokString, s.col)
	case s.buf:
		s.emit(tokOther, s.bufCol())
	default:
		s.bufRunes, s.bufNonSpace = 0, 0 // go-yaml keeps its origin buffer
		return
	}
	s.resetBuffer()
}

func (s *prescanner) resetBuffer() {
	s.buf, s.stale, s.bufRunes, s.bufNonSpace = false, false, 0, 0
	s.obuf, s.obufText = s.i, false
}

func (s *prescanner) clear() {
	s.resetBuffer()
	s.multi = nil
}

func (s *prescanner) emit(kind tokenKind, col int) {
	s.tokens++
	s.last = lastToken{valid: true, kind: kind, col: col}
	if s.tokens > MaxNodes && s.err == nil {
		s.refuse("the file has more than %d YAML nodes (scalars, keys, '-', ',' and brackets)", MaxNodes)
	}
}

// lexError is a token go-yaml refuses: its parser will report it, and its
// scanner carries on from here with an empty buffer.
func (s *prescanner) lexError() {
	s.emit(tokOther, s.col)
	s.clear()
	s.last = lastToken{}
}

func (s *prescanner) refuse(format string, args ...any) {
	s.err = &Error{File: s.file, Line: s.line, Column: max(s.col, 1), Msg: fmt.Sprintf(format, args...)}
}
