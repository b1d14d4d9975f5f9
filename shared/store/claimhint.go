package store

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Claims scan the queue index (queued_at, id) from a position this process
// remembers instead of from its head.
//
// Why: claiming a job leaves its old row version, and so its entry in the
// queue index, behind at the head of the queue. Normally the next scan to
// pass it marks it dead and later scans skip it cheaply. But while any
// transaction anywhere holds an old snapshot (a long report, a stuck
// session, pg_dump), PostgreSQL may remove nothing newer than it: every
// claimed job's entry stays live-looking, and a claim that starts at the
// head must visit all of them, each a heap fetch. Claims slow down by the
// number of jobs claimed since the snapshot was taken.
//
// So each claim starts after the highest position this process has claimed
// for the same labels. That is only a hint, never a correctness matter: the
// claim statement still takes the oldest matching QUEUED job after the
// hint, under the same locks. What the hint can pass over is a job that was
// behind it but not claimable when the hint moved: one whose queueing
// transaction committed late (its queued_at is its transaction's start), or
// that another claim held locked and then rolled back. Scans from the head
// find those, every fullScanEvery, so such a job waits at most about that
// long. The hint is always the position of a job some scan claimed, and
// every scan passed over only what it could not claim, so an out-of-date or
// mis-ordered hint only makes a scan longer, never skips a claimable job
// for longer than that.
type claimHints struct {
	mu sync.Mutex
	m  map[string]*claimHint
}

type claimHint struct {
	at       time.Time // queued_at of the highest job claimed
	id       string
	lastFull time.Time // last scan from the head
}

const (
	fullScanEvery = time.Second
	maxHintKeys   = 1024 // distinct label sets remembered
)

// queueStart is before every queue position.
var queueStart = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)

func hintKey(labels []string, scope Scope, features []string) string {
	s := slices.Clone(labels)
	slices.Sort(s)
	p := slices.Clone(scope.Projects)
	slices.Sort(p)
	f := slices.Clone(features)
	slices.Sort(f)
	// Runners of other scopes or features see other jobs: each keeps its
	// own place.
	return strings.Join(s, "\x00") + "\x01" + strings.Join(p, "\x00") + fmt.Sprintf("\x01%v%v\x01", scope.Untrusted, scope.UntrustedOnly) +
		strings.Join(f, "\x00")
}

// start returns where the next claim for labels should scan from, and
// whether that is the head of the queue. A scan from the head is due when
// there is no hint yet or the last one is fullScanEvery old; the caller
// that is told so does it, the others keep using the hint meanwhile.
func (h *claimHints) start(key string, now time.Time) (time.Time, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.get(key)
	if now.Sub(c.lastFull) >= fullScanEvery {
		c.lastFull = now
		return queueStart, "", true
	}
	return c.at, c.id, false
}

// fullScanDue is start's question after a scan from the hint found nothing:
// may a scan from the head run now? At most every fullScanEvery, because
// under an old snapshot it is the expensive scan and idle runners poll.
func (h *claimHints) fullScanDue(key string, now time.Time) bool {
	_, _, full := h.start(key, now)
	return full
}

// claimed notes the queue position of a job a scan claimed.
func (h *claimHints) claimed(key string, at time.Time, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.get(key)
	if at.After(c.at) || at.Equal(c.at) && id > c.id {
		c.at, c.id = at, id
	}
}

func (h *claimHints) get(key string) *claimHint {
	c := h.m[key]
	if c == nil {
		if h.m == nil || len(h.m) >= maxHintKeys {
			h.m = map[string]*claimHint{}
		}
		c = &claimHint{at: queueStart}
		h.m[key] = c
	}
	return c
}
