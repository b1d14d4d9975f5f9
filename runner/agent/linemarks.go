package agent

import (
	"bytes"
	"io"
	"time"

	"github.com/forgeci/forgeci/shared/protocol"
)

// lineMarks passes a job's masked output on to dst and marks where its
// lines start with the time they were written (protocol.LineTime): a mark
// only when the millisecond differs from the previous mark's, as lines of
// one burst share it. Offsets count the bytes passed on, which are the
// log's stored bytes.
type lineMarks struct {
	dst     io.Writer
	now     func() time.Time
	written int64               // bytes passed on
	start   bool                // the next byte starts a line
	marks   []protocol.LineTime // absolute offsets, not yet taken
	lastMS  int64               // of the newest mark
	// Of what was taken: whether it ended a line, and its newest mark's time.
	takenNL bool
	takenMS int64
}

// maxHeldMarks bounds the marks held untaken (16 bytes each): past it a
// line goes unmarked and shows the time of the mark before it.
const maxHeldMarks = 64 << 10

func (l *lineMarks) Write(p []byte) (int, error) {
	ms := l.now().UnixMilli()
	for i, c := range p {
		if l.start && ms != l.lastMS && len(l.marks) < maxHeldMarks {
			l.marks = append(l.marks, protocol.LineTime{l.written + int64(i), ms})
			l.lastMS = ms
		}
		l.start = c == '\n'
	}
	l.written += int64(len(p))
	return l.dst.Write(p)
}

// take returns the marks of batch, the bytes from offset start, relative
// to it, and forgets them. The first line that starts in batch is always
// marked (with an earlier mark's time when it has none of its own), so
// that each stored chunk tells its own lines' times.
func (l *lineMarks) take(start int64, batch []byte) []protocol.LineTime {
	if start == 0 {
		l.takenNL = true
	}
	end := start + int64(len(batch))
	n := 0
	for n < len(l.marks) && l.marks[n].Offset() < end {
		n++
	}
	own := l.marks[:n]
	first := int64(-1) // where the first line starting in batch starts
	if i := bytes.IndexByte(batch, '\n'); l.takenNL && len(batch) > 0 {
		first = 0
	} else if i >= 0 && i+1 < len(batch) {
		first = int64(i + 1)
	}
	var out []protocol.LineTime
	if first >= 0 && l.takenMS != 0 && (len(own) == 0 || own[0].Offset()-start > first) {
		out = append(out, protocol.LineTime{first, l.takenMS})
	}
	for _, m := range own {
		if len(out) == protocol.MaxLineTimes {
			break // lines of a few bytes each: the first ones' times tell enough
		}
		out = append(out, protocol.LineTime{m.Offset() - start, m[1]})
	}
	if len(own) > 0 {
		l.takenMS = own[len(own)-1][1]
	}
	l.marks = l.marks[n:]
	if len(batch) > 0 {
		l.takenNL = batch[len(batch)-1] == '\n'
	}
	return out
}
