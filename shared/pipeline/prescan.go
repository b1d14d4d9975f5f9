package pipeline

import "unicode/utf8"

// prescan counts the tokens go-yaml's scanner will make of src, and the
// nesting of its flow collections, without making them: go-yaml's lexer
// holds every token in memory (about 300 bytes each) before its parser
// starts, so the count has to be known first.
//
// It mirrors the scanner of github.com/goccy/go-yaml v1.19.2 decision by
// decision (scanner/scanner.go, scan and the scan* functions it calls):
// text inside block scalars, quoted scalars, comments and plain scalars is
// not counted, exactly where go-yaml treats it as text, and go-yaml's
// quirks are kept (a tab in a double-quoted scalar can make it skip
// characters after the closing quote; a scan error restarts with an empty
// buffer). Where the two could still differ, the exact check on go-yaml's
// real tokens (checkTokens) runs before the parser, so a miss here costs
// at most the lexer's linear work. FuzzParse checks the count is never
// below go-yaml's.
type prescanner struct {
	file string
	src  []byte
	i    int // byte offset of the current character
	line int
	col  int // in characters, as go-yaml counts them

	firstChar       bool // no character other than spaces yet on this line
	indentNum       int
	state           indentState
	lastDelim       int // column of the last key, '-' or '?' (0: none)
	flowSeq         int // open '[': may go below zero, as in go-yaml
	flowMap         int
	anchor, alias   bool // an anchor or alias name is being read
	directive       bool
	buf             bool // the buffer holds a plain scalar's text
	stale           bool // or only seems to (endBlock)
	bufRunes        int  // characters in the buffer, trailing spaces included
	bufNonSpace     int  // characters up to its last one that is not a space
	savedCol        int  // the buffer's column, saved at its first line break
	saved           bool
	obuf            int  // byte offset where go-yaml's "origin" buffer starts
	obufText        bool // and whether it holds more than spaces and tabs
	last            lastToken
	multi           *multiLine // inside a block scalar
	lineEnd, lineWS int        // the line of a double-quoted tab: its end and last non-space

	tokens int
	err    *Error
}

type indentState int

const (
	indentKeep indentState = iota
	indentUp
	indentDown
)

type tokenKind int

const (
	tokOther tokenKind = iota
	tokQuoted
	tokString
	tokMapValue
)

// lastToken is what go-yaml's scanner looks back at: the last token made
// since its buffer was last restarted.
type lastToken struct {
	valid bool
	kind  tokenKind
	col   int
}

// multiLine is go-yaml's MultiLineState, reduced to what decides where a
// block scalar ends and whether go-yaml's buffer is left looking full.
type multiLine struct {
	optIndent      int // the header's indentation indicator (any sign)
	firstIndentCol int
	lineIndentCol  int
	spaceOnlyCol   int
	keep, strip    bool // chomping: '+' and '-' (or a raw folded scalar)
	headerCol1     bool // a header in column 1 with no comment after it
	text           bool // buffered: a character other than a space or line break
	buffered       bool // buffered: anything
	shape          int  // the buffered spaces and line breaks, for strip
	spaces         bool // buffered: a space
}

func prescan(file string, src []byte) (tokens int, err *Error) {
	s := &prescanner{file: file, src: src, line: 1, col: 1, firstChar: true}
	for s.i < len(s.src) && s.err == nil {
		c, _ := utf8.DecodeRune(s.src[s.i:])
		s.updateIndent(c)
		if s.state == indentDown && s.multi != nil {
			s.endBlock()
		} else if s.state == indentDown {
			s.flush()
		}
		if s.multi != nil {
			s.scanMultiLine(c)
			continue
		}
		if !s.scanToken(c) {
			s.addBuf(c)
			s.advance(1, 1)
		}
	}
	if s.err == nil {
		s.flush()
	}
	return s.tokens, s.err
}

// updateIndent is go-yaml's: the first character on a line that is not a
// space, tab or line break says whether the line is indented further than
// the last key or '-' (up) or not (down, which ends scalars).
func (s *prescanner) updateIndent(c rune) {
	switch {
	case s.firstChar && (c == '\n' || c == '\r' || c == '\t'):
		return
	case s.firstChar && c == ' ':
		s.indentNum++
		return
	case !s.firstChar:
		s.state = indentKeep
		return
	}
	if s.lastDelim != 0 {
		s.state = indentDown
		if s.lastDelim < s.col {
			s.state = indentUp
		}
	}
	s.firstChar = false
}

// scanToken is the switch of go-yaml's scan loop; false means the
// character is text for the buffer.
func (s *prescanner) scanToken(c rune) bool {
	switch c {
	case '{', '[', '}', ']', ',':
		return s.scanFlow(c)
	case '.':
		if s.indentNum != 0 || s.col != 1 || s.repeat('.') != 3 {
			return false
		}
		s.flush()
		return s.indicator(3, tokOther)
	case '<':
		if !s.isMergeKey() {
			return false
		}
		s.lastDelim = s.col
		return s.indicator(2, tokOther)
	case '-':
		return s.scanDocumentStart() || s.scanRawFolded() || s.scanSequence()
	case ':':
		return s.scanMapDelim()
	case '|', '>':
		return !s.buf && s.scanBlockHeader()
	case '!':
		return !s.buf && !s.directive && s.scanTag()
	case '%':
		if s.buf || s.indentNum != 0 {
			return false
		}
		s.flush()
		s.directive = true
		return s.indicator(1, tokOther)
	case '?':
		if s.buf || (s.next(1) != ' ' && s.next(1) != '\t') {
			return false
		}
		s.lastDelim = s.col
		return s.indicator(1, tokOther)
	case '&', '*':
		if s.buf {
			return false
		}
		s.flush()
		if c == '&' {
			s.anchor = true
		} else {
			s.alias = true
		}
		return s.indicator(1, tokOther)
	case '#':
		return s.scanComment()
	case '\'', '"':
		return !s.buf && s.scanQuote(c)
	case '\r', '\n':
		s.scanNewLine(c)
		return true
	case ' ':
		return s.scanWhiteSpace()
	case '@', '`':
		if s.buf {
			return false
		}
		s.advance(1, 1)
		s.lexError()
		return true
	case '\t':
		return s.scanTab()
	}
	return false
}

// scanFlow is a flow indicator: in a plain scalar outside flow
// collections, '{', '[' and ',' are text; '}' and ']' only close what is
// open (though ']' with no scalar before it counts below zero).
func (s *prescanner) scanFlow(c rune) bool {
	switch {
	case (c == '{' || c == '[') && s.buf && !s.flowMode():
		return false
	case c == '}' && s.flowMap <= 0:
		return false
	case c == ']' && s.buf && s.flowSeq <= 0:
		return false
	case c == ',' && !s.flowMode():
		return false
	}
	s.flush()
	switch c {
	case '{':
		s.flowMap++
	case '[':
		s.flowSeq++
	case '}':
		s.flowMap--
	case ']':
		s.flowSeq--
	}
	if max(s.flowMap, 0)+max(s.flowSeq, 0) > MaxDepth {
		s.refuse("nesting is deeper than %d levels", MaxDepth)
	}
	return s.indicator(1, tokOther)
}

// indicator makes one token of the next n characters and restarts the
// buffer, as go-yaml does after every indicator.
func (s *prescanner) indicator(n int, kind tokenKind) bool {
	s.emit(kind, s.col)
	s.advance(n, n)
	s.clear()
	return true
}

func (s *prescanner) scanDocumentStart() bool {
	if s.indentNum != 0 || s.col != 1 || s.repeat('-') != 3 {
		return false
	}
	if c := s.next(3); c != 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
		return false
	}
	s.flush()
	s.indicator(3, tokOther)
	s.lastDelim, s.indentNum = 0, 0
	return true
}

// scanRawFolded: a '-' that starts a further indented line inside a plain
// scalar turns the rest of the scalar into a block, ended by indentation.
func (s *prescanner) scanRawFolded() bool {
	if !s.buf || s.state != indentUp {
		return false
	}
	s.multi = &multiLine{firstIndentCol: s.col, lineIndentCol: s.col, strip: true, text: true, buffered: true}
	s.addBuf('-')
	s.advance(1, 1)
	return true
}

func (s *prescanner) scanSequence() bool {
	if s.buf {
		return false
	}
	if c := s.next(1); c != 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
		return false
	}
	if s.obufStartsWithTab() {
		s.advance(1, 1)
		s.lexError()
		return true
	}
	s.flush()
	s.lastDelim = s.col
	return s.indicator(1, tokOther)
}

func (s *prescanner) scanMapDelim() bool {
	nc := s.next(1)
	if s.directive || s.anchor || s.alias {
		return false
	}
	if s.flowMap <= 0 && nc != ' ' && nc != '\t' && nc != '\n' && nc != '\r' && s.i+1 < len(s.src) {
		return false
	}
	if s.flowMap > 0 && (nc == '/' || (s.last.valid && s.last.kind == tokMapValue)) {
		return false
	}
	if s.obufStartsWithTab() {
		s.advance(1, 1)
		s.lexError()
		return true
	}
	if s.buf {
		col := s.bufCol()
		s.flush()
		s.lastDelim = col
	} else if s.last.valid && s.last.kind == tokQuoted {
		s.lastDelim = s.last.col
	}
	s.saved = false // go-yaml drops its saved position even with no scalar
	return s.indicator(1, tokMapValue)
}
