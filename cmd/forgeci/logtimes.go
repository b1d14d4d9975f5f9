package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"time"

	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// stamper prefixes each line of a job's log with the time its runner saw
// it (forgeci logs --timestamps), from the marks the API serves beside
// the log (GET .../steps?times=1): a line has the time of the last mark
// at or before its start.
type stamper struct {
	out   io.Writer
	times []protocol.LineTime // absolute stored offsets, rising
	at    int64               // stored offset of the next byte
	start bool                // the next byte starts a line
}

func newStamper(out io.Writer) *stamper { return &stamper{out: out, start: true} }

// fetch reads the marks of the stored bytes [from, to), a bounded number
// a request.
func (s *stamper) fetch(ctx context.Context, cl *apiClient, runID, jobID string, gen int, from, to int64) error {
	for from < to {
		var idx store.LogIndex
		path := fmt.Sprintf("/v1/runs/%s/jobs/%s/steps?generation=%d&times=1&from=%d&to=%d",
			url.PathEscape(runID), url.PathEscape(jobID), gen, from, to)
		if err := cl.do(ctx, "GET", path, nil, &idx); err != nil {
			return err
		}
		for _, t := range idx.Times {
			if n := len(s.times); n == 0 || t.Offset() > s.times[n-1].Offset() {
				s.times = append(s.times, t)
			}
		}
		if idx.TimesTo <= from {
			return nil // nothing stored there yet
		}
		from = idx.TimesTo
	}
	return nil
}

// timeAt is the time of the line starting at stored offset o: the last
// mark at or before it.
func (s *stamper) timeAt(o int64) (time.Time, bool) {
	i := sort.Search(len(s.times), func(i int) bool { return s.times[i].Offset() > o })
	if i == 0 {
		return time.Time{}, false
	}
	return s.times[i-1].Time(), true
}

// write prints data, the log from s.at up to the stored offset next. The
// text is masked, so its length may differ from next-s.at: offsets in it
// are counted as if it were not, and stop at next.
func (s *stamper) write(data []byte, next int64) error {
	out := bufio.NewWriter(s.out)
	defer out.Flush()
	for i, c := range data {
		if s.start {
			if t, ok := s.timeAt(min(s.at+int64(i), next)); ok {
				if _, err := out.WriteString(t.Format("2006-01-02T15:04:05.000Z ")); err != nil {
					return err
				}
			}
		}
		if err := out.WriteByte(c); err != nil {
			return err
		}
		s.start = c == '\n'
	}
	s.at = next
	return nil
}
