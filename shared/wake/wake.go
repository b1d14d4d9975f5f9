// Package wake holds ForgeCI's wake-up hints: small notes in S3 that say
// whether work may exist, so that what runs while nothing happens (a
// runner's poll, the sweeper, the GitHub worker, the collector) need not
// ask PostgreSQL, and an idle database can pause (Aurora's auto-pause
// needs minutes with no connection at all).
//
// A hint decides only whether to look, never what is done: claims, lease
// ends and deliveries are still decided by PostgreSQL, under its locks.
// Every hint fails toward looking:
//   - a note that cannot be read means "look";
//   - a transaction whose note cannot be written does not commit;
//   - a pass whose next note cannot be written keeps the notes that woke
//     it, so the next invocation runs again.
//
// Writes are read back before they count, so a write S3 acknowledged but
// did not keep (or a test's dropped write) is a failed write.
package wake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Objects is the store the notes live in (the CAS bucket, cas.Store).
type Objects interface {
	PutNote(ctx context.Context, key string, body []byte) error
	GetNote(ctx context.Context, key string, max int64) ([]byte, error)
	ListNotes(ctx context.Context, prefix string, max int) ([]string, error)
	Delete(ctx context.Context, keys []string) error
}

// Kinds of scheduled work, each with its own due notes.
const (
	Sweep = "sweep" // leases that can expire, schedules, notifications
	SCM   = "scm"   // GitHub deliveries and check notices
	GC    = "gc"    // the garbage collector
)

const (
	prefix        = "hints/"
	queueKey      = prefix + "queue"
	duePrefix     = prefix + "due/"
	verdictPrefix = prefix + "runners/"
	maxNote       = 4096
	// writeTimeout bounds one note write, so that MaxCommitDelay holds.
	writeTimeout = 2 * time.Second
)

// Timing of the queue hint and of due notes (see the package doc and
// docs/runner-protocol.md "Idle polls").
const (
	// MaxCommitDelay is the longest a transaction may take from its mark
	// to its commit: the store fails a write whose notes took most of it,
	// and notes again the work of one whose commit ended later.
	MaxCommitDelay = 5 * time.Second
	// QueueSettle is how long after the queue hint is written every
	// transaction it covers has committed (or rolled back): a scan that
	// starts after it sees their jobs.
	QueueSettle = 20 * time.Second
	// Skew is the clock difference between two Lambda containers allowed
	// for.
	Skew = time.Second
)

// ErrLost is a note write that did not stick.
var ErrLost = errors.New("wake: a hint write was lost")

// Board reads and writes the notes. One per process; safe for concurrent
// use.
type Board struct {
	obj   Objects
	now   func() time.Time
	grain time.Duration
	// Timing (the constants by default; tests shorten them, keeping
	// settle > commitDelay + Skew).
	settle, commitDelay, verdictCache time.Duration

	mu       sync.Mutex
	marked   map[string]time.Time // kind: slot of the note this process wrote
	queuedAt time.Time            // when this process last wrote the queue hint
	verdicts map[string]cachedVerdict

	// Drop, for tests: a write to a key it matches is lost (not made,
	// though S3 would have answered).
	Drop func(key string) bool
}

// New makes a board over obj. grain is the width of a due note's slot:
// marks within one grain share a note (a minute in AWS, where the
// scheduled functions run every minute).
func New(obj Objects, grain time.Duration) *Board {
	if grain <= 0 {
		grain = time.Minute
	}
	return &Board{obj: obj, now: time.Now, grain: grain, marked: map[string]time.Time{},
		verdicts: map[string]cachedVerdict{}, settle: QueueSettle, commitDelay: MaxCommitDelay, verdictCache: VerdictCache}
}

// SetTiming shortens the queue hint's settle time, the longest commit
// delay and how long a verdict is believed (tests). settle must exceed
// commitDelay+Skew.
func (b *Board) SetTiming(settle, commitDelay, verdictCache time.Duration) {
	if settle <= commitDelay+Skew {
		panic("wake: settle must exceed commitDelay+Skew")
	}
	b.settle, b.commitDelay, b.verdictCache = settle, commitDelay, verdictCache
}

// CommitDelay is the longest a transaction may take from its mark to its
// commit.
func (b *Board) CommitDelay() time.Duration { return b.commitDelay }

// SetClock replaces the board's clock (tests).
func (b *Board) SetClock(now func() time.Time) { b.now = now }

// Grain is the width of a due note's slot.
func (b *Board) Grain() time.Duration { return b.grain }

// put writes body at key and reads it back.
func (b *Board) put(ctx context.Context, key string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if b.Drop == nil || !b.Drop(key) {
		if err := b.obj.PutNote(ctx, key, body); err != nil {
			return err
		}
	}
	got, err := b.obj.GetNote(ctx, key, maxNote)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrLost, key, err)
	}
	if string(got) != string(body) {
		// Another writer's note is there instead: for the queue hint that
		// is fine only if it settles no sooner (checked by the caller).
		return errOverwritten{got}
	}
	return nil
}

type errOverwritten struct{ got []byte }

func (e errOverwritten) Error() string { return ErrLost.Error() + ": overwritten" }
func (e errOverwritten) Unwrap() error { return ErrLost }

// queueNote is the queue hint: a fresh token for each write, and the time
// after which every transaction it covers has committed.
type queueNote struct {
	Token    string `json:"token"`
	SettleAt int64  `json:"settle_at"` // Unix milliseconds
}

// MarkQueued is called before a transaction that queues jobs commits, and
// started is when the caller began (the transaction must commit within
// MaxCommitDelay of it). It writes a new queue token unless this process's
// last one settles late enough to cover the commit.
func (b *Board) MarkQueued(ctx context.Context, started time.Time) error {
	b.mu.Lock()
	covered := !b.queuedAt.IsZero() && started.Add(b.commitDelay+Skew).Before(b.queuedAt.Add(b.settle))
	b.mu.Unlock()
	if covered {
		return nil
	}
	at := b.now()
	n := queueNote{Token: randomToken(), SettleAt: at.Add(b.settle).UnixMilli()}
	body, _ := json.Marshal(n)
	err := b.put(ctx, queueKey, body)
	var ow errOverwritten
	if errors.As(err, &ow) {
		// A concurrent writer's token replaced ours: runners see a change
		// all the same, and its settle time (set after ours) covers us.
		var other queueNote
		if json.Unmarshal(ow.got, &other) == nil && other.SettleAt >= n.SettleAt-Skew.Milliseconds() {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("wake: mark queued: %w", err)
	}
	b.mu.Lock()
	b.queuedAt = at
	b.mu.Unlock()
	return nil
}

// QueueState is what a poll learns from the queue hint.
type QueueState struct {
	// Token is the current token, "" when there is none to trust yet
	// (unreadable, missing or not settled): the caller scans.
	Token string
	// Idle is whether the caller's hint is the current, settled token:
	// nothing was queued since a scan that found nothing.
	Idle bool
	// Quiet is how long ago the token settled (0 if not settled).
	Quiet time.Duration
	// Missing is true when there is no hint yet: the scanning caller
	// writes one (MarkQueued) so that later polls can be idle.
	Missing bool
}

// Queue reads the queue hint against the caller's last token.
func (b *Board) Queue(ctx context.Context, seen string) QueueState {
	body, err := b.obj.GetNote(ctx, queueKey, maxNote)
	if err != nil {
		return QueueState{Missing: isNotFound(err)}
	}
	var n queueNote
	if json.Unmarshal(body, &n) != nil || n.Token == "" {
		return QueueState{Missing: true}
	}
	since := b.now().Sub(time.UnixMilli(n.SettleAt)) - Skew
	if since < 0 {
		return QueueState{}
	}
	return QueueState{Token: n.Token, Idle: seen != "" && seen == n.Token, Quiet: since}
}

func randomToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Now is the board's clock.
func (b *Board) Now() time.Time { return b.now() }

// GetNote reads a named note of one value ("" when there is none).
func (b *Board) GetNote(ctx context.Context, name string) (string, error) {
	body, err := b.obj.GetNote(ctx, prefix+"notes/"+name, maxNote)
	if isNotFound(err) {
		return "", nil
	}
	return string(body), err
}

// SetNote writes a named note (read back, as every write).
func (b *Board) SetNote(ctx context.Context, name, value string) error {
	return b.put(ctx, prefix+"notes/"+name, []byte(value))
}
