// Package mask hides secret values in log text: a set of patterns made
// from the values (see Forms), matched all at once, with every matched
// byte replaced. Where matches overlap or nest, their union is one masked
// span, shown as one Replacement.
//
// The result is a function of the whole text only: masking it in one
// piece (Bytes), as a stream cut anywhere (Stream), or as consecutive
// windows of stored bytes (Window) gives the same bytes. A span is shown
// as Replacement where it starts; its other bytes show as nothing.
package mask

import "slices"

// Replacement stands for one masked span.
const Replacement = "***"

// Set is a compiled set of patterns. The nil *Set masks nothing.
type Set struct {
	ac      *automaton
	longest int
}

// New builds the set for secret values: every form of every value (see
// Forms). It returns nil when no value is long enough to mask.
func New(values []string) *Set {
	var forms []string
	for _, v := range values {
		forms = append(forms, Forms(v)...)
	}
	return fromForms(forms)
}

// fromForms builds a set matching each form (long ones as pieces).
func fromForms(forms []string) *Set {
	var pats []string
	for _, f := range forms {
		if f != "" {
			pats = append(pats, pieces(f)...)
		}
	}
	if len(pats) == 0 {
		return nil
	}
	slices.Sort(pats)
	pats = slices.Compact(pats)
	s := &Set{}
	bs := make([][]byte, len(pats))
	for i, p := range pats {
		bs[i] = []byte(p)
		s.longest = max(s.longest, len(p))
	}
	s.ac = newAutomaton(bs)
	return s
}

// Longest is the length of the longest pattern (at most MaxPattern): a
// match covering a byte lies within Longest-1 bytes on either side of it.
func (s *Set) Longest() int {
	if s == nil {
		return 0
	}
	return s.longest
}

// Bytes returns b masked, as a whole text: a new slice.
func (s *Set) Bytes(b []byte) []byte {
	out, _ := s.Window(b, 0, len(b), true)
	return out
}

// String is Bytes for a string.
func (s *Set) String(t string) string {
	if s == nil {
		return t
	}
	return string(s.Bytes([]byte(t)))
}

// Window masks the bytes buf[lo:hi] of a longer text for display, buf
// holding context around them. Give Longest()-1 bytes of context on each
// side (or as many as the text has): then a secret that straddles lo or
// hi is masked, and consecutive windows concatenate to exactly what Bytes
// gives for the whole text. final says the text ends for good at the end
// of buf; when it does not (a log still being written), bytes at the end
// that may yet begin a match are held back. Window returns the masked
// text and where in buf it ends: hi, or less when bytes were held back.
func (s *Set) Window(buf []byte, lo, hi int, final bool) ([]byte, int) {
	if s == nil {
		return slices.Clone(buf[lo:hi]), hi
	}
	n, spans := s.ac.scan(0, buf, 0, nil)
	if !final {
		hi = max(lo, min(hi, len(buf)-s.ac.held(n)))
	}
	return render(nil, buf, 0, int64(lo), int64(hi), spans), hi
}

// render appends to dst the masked text of the stream bytes [lo, hi),
// buf holding the stream's bytes from offset base on, spans the masked
// spans (sorted, disjoint) that may touch them. A span is written as
// Replacement at its first byte and as nothing elsewhere, so the text of
// a span that began before lo is already written.
func render(dst, buf []byte, base, lo, hi int64, spans []span) []byte {
	pos := lo
	for _, sp := range spans {
		if sp.hi <= pos {
			continue
		}
		if sp.lo >= hi {
			break
		}
		if sp.lo > pos {
			dst = append(dst, buf[pos-base:sp.lo-base]...)
		}
		if sp.lo >= lo {
			dst = append(dst, Replacement...)
		}
		pos = min(sp.hi, hi)
	}
	if pos < hi {
		dst = append(dst, buf[pos-base:hi-base]...)
	}
	return dst
}
