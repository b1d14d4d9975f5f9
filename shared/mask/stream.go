package mask

import (
	"cmp"
	"io"
	"slices"
)

// Stream masks a stream of bytes on its way to dst. Bytes are passed on
// as soon as no match can cover them any more: only the end of what was
// written that may begin a pattern is held back, never more than
// Longest()-1 bytes. What dst receives is the same whatever the sizes of
// the writes. Stream is not safe for concurrent use.
type Stream struct {
	set   *Set
	dst   io.Writer
	state int32
	pend  []byte // bytes not yet passed on, from offset base
	base  int64
	spans []span // masked spans not wholly passed on
	out   []byte // reused for what is passed on
}

// NewStream returns a Stream writing to dst; with a nil set it masks
// nothing and holds nothing back.
func (s *Set) NewStream(dst io.Writer) *Stream {
	return &Stream{set: s, dst: dst}
}

// Write masks p and passes on what can no longer change. It returns
// len(p), or an error from dst.
func (w *Stream) Write(p []byte) (int, error) {
	if w.set == nil {
		return w.dst.Write(p)
	}
	end := w.base + int64(len(w.pend))
	w.state, w.spans = w.set.ac.scan(w.state, p, end, w.spans)
	w.pend = append(w.pend, p...)
	safe := end + int64(len(p)) - int64(w.set.ac.held(w.state))
	if err := w.release(safe); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Held is how many written bytes are held back.
func (w *Stream) Held() int { return len(w.pend) }

// Close passes on everything held back: the stream has ended, so no match
// can grow any more. The Stream may be written again, as a new stream.
func (w *Stream) Close() error {
	err := w.release(w.base + int64(len(w.pend)))
	w.state, w.spans = 0, w.spans[:0]
	return err
}

// release passes on the stream's bytes before offset upto.
func (w *Stream) release(upto int64) error {
	if upto <= w.base {
		return nil
	}
	w.out = render(w.out[:0], w.pend, w.base, w.base, upto, w.spans)
	keep := w.spans[:0]
	for _, sp := range w.spans {
		if sp.hi > upto {
			keep = append(keep, sp)
		}
	}
	w.spans = keep
	w.pend = w.pend[:copy(w.pend, w.pend[upto-w.base:])]
	if cap(w.pend) > 64<<10 {
		w.pend = append([]byte(nil), w.pend...) // after a large write, let its buffer go
	}
	w.base = upto
	if len(w.out) == 0 {
		return nil
	}
	_, err := w.dst.Write(w.out)
	return err
}

// Switch makes w mask with set from now on: set holds the patterns still
// to mask, new ones among them (a value that became secret while the
// stream runs, such as an identity token just issued); a pattern left
// out is masked no more, except where it was already found. The bytes held back are
// scanned again with set and the spans found join those already found,
// so neither an old value written across the switch nor a new one
// written after it passes unmasked. Bytes passed on before the switch
// stay as they were.
func (w *Stream) Switch(set *Set) {
	if set == nil {
		return
	}
	w.set = set
	var found []span
	w.state, found = set.ac.scan(0, w.pend, w.base, nil)
	w.spans = unionSpans(w.spans, found)
}

// unionSpans merges two lists of sorted, disjoint spans into one.
func unionSpans(a, b []span) []span {
	all := append(append([]span(nil), a...), b...)
	slices.SortFunc(all, func(x, y span) int { return cmp.Compare(x.lo, y.lo) })
	out := all[:0]
	for _, sp := range all {
		if n := len(out); n > 0 && sp.lo < out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, sp.hi)
			continue
		}
		out = append(out, sp)
	}
	return out
}
