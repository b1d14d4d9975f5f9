package wake_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/wake"
)

// clock is a settable clock for the board (S3 itself is real).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newBoard(t *testing.T) (*wake.Board, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	b := wake.New(castest.New(t), time.Minute)
	b.SetClock(c.now)
	return b, c
}

// pass runs a pass that counts its calls and returns next.
func pass(t *testing.T, b *wake.Board, kind string, next time.Time, err error) (ran bool, calls int) {
	t.Helper()
	ran, perr := b.Pass(context.Background(), kind, func(context.Context) (time.Time, error) {
		calls++
		return next, err
	})
	if !errors.Is(perr, err) && (perr == nil) != (err == nil) {
		t.Fatalf("pass error %v, want %v", perr, err)
	}
	return ran, calls
}

func TestPassRunsOnlyWhenDue(t *testing.T) {
	b, c := newBoard(t)
	ctx := context.Background()
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); ran {
		t.Fatal("a pass ran with no note at all")
	}
	if err := b.Mark(ctx, c.now(), wake.Sweep); err != nil {
		t.Fatal(err)
	}
	if ran, _ := pass(t, b, wake.GC, time.Time{}, nil); ran {
		t.Fatal("a mark of sweep woke gc")
	}
	// Due now: the pass runs, and keeps the note until every commit it
	// covers must have been visible to a pass (slot + grain + commit delay).
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); !ran {
		t.Fatal("a marked pass did not run")
	}
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); !ran {
		t.Fatal("the note was dropped before the commits it covers were surely visible")
	}
	c.add(time.Minute + wake.MaxCommitDelay + wake.Skew)
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); !ran {
		t.Fatal("a marked pass did not run")
	}
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); ran {
		t.Fatal("the consumed note still woke a pass")
	}
}

func TestPassNotesItsNextTime(t *testing.T) {
	b, c := newBoard(t)
	ctx := context.Background()
	if err := b.Mark(ctx, c.now(), wake.Sweep); err != nil {
		t.Fatal(err)
	}
	expiry := c.now().Add(10 * time.Minute)
	c.add(2 * time.Minute)
	if ran, _ := pass(t, b, wake.Sweep, expiry, nil); !ran {
		t.Fatal("did not run")
	}
	if ran, _ := pass(t, b, wake.Sweep, expiry, nil); ran {
		t.Fatal("ran before the next time it noted")
	}
	c.add(8 * time.Minute)
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); !ran {
		t.Fatal("did not run at the lease's expiry")
	}
}

// A pass whose next note is lost keeps the notes that woke it: the next
// invocation runs again (fails toward an extra invocation).
func TestLostNextNoteKeepsTheWork(t *testing.T) {
	b, c := newBoard(t)
	ctx := context.Background()
	if err := b.Mark(ctx, c.now(), wake.Sweep); err != nil {
		t.Fatal(err)
	}
	c.add(5 * time.Minute)
	b.Drop = func(string) bool { return true }
	for i := 0; i < 3; i++ {
		ran, err := b.Pass(ctx, wake.Sweep, func(context.Context) (time.Time, error) { return c.now().Add(time.Hour), nil })
		if !ran || !errors.Is(err, wake.ErrLost) {
			t.Fatalf("pass %d: ran %v err %v; want a run and ErrLost", i, ran, err)
		}
	}
	b.Drop = nil
	if ran, _ := pass(t, b, wake.Sweep, c.now().Add(time.Hour), nil); !ran {
		t.Fatal("the work was forgotten after lost writes")
	}
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); ran {
		t.Fatal("ran again though its next time is an hour away")
	}
	// A failed pass keeps its notes too.
	c.add(time.Hour)
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, errors.New("db down")); !ran {
		t.Fatal("did not run")
	}
	if ran, _ := pass(t, b, wake.Sweep, time.Time{}, nil); !ran {
		t.Fatal("a failed pass lost its note")
	}
}

func TestLostMarkIsAnError(t *testing.T) {
	b, c := newBoard(t)
	b.Drop = func(key string) bool { return strings.Contains(key, "/due/") }
	if err := b.Mark(context.Background(), c.now(), wake.Sweep); !errors.Is(err, wake.ErrLost) {
		t.Fatalf("a lost mark answered %v", err)
	}
	b.Drop = func(key string) bool { return strings.HasSuffix(key, "queue") }
	if err := b.MarkQueued(context.Background(), c.now()); !errors.Is(err, wake.ErrLost) {
		t.Fatalf("a lost queue mark answered %v", err)
	}
}

func TestQueueHint(t *testing.T) {
	b, c := newBoard(t)
	ctx := context.Background()
	if qs := b.Queue(ctx, ""); !qs.Missing || qs.Idle || qs.Token != "" {
		t.Fatalf("no hint yet: %+v", qs)
	}
	if err := b.MarkQueued(ctx, c.now()); err != nil {
		t.Fatal(err)
	}
	if qs := b.Queue(ctx, ""); qs.Token != "" || qs.Idle {
		t.Fatalf("an unsettled hint was handed out: %+v", qs)
	}
	c.add(wake.QueueSettle + wake.Skew)
	qs := b.Queue(ctx, "")
	if qs.Token == "" || qs.Idle {
		t.Fatalf("settled hint: %+v", qs)
	}
	if again := b.Queue(ctx, qs.Token); !again.Idle {
		t.Fatalf("the same token is not idle: %+v", again)
	}
	// A transaction that starts while this process's last hint still
	// covers its commit writes nothing new; a later one does.
	c.add(-wake.QueueSettle + wake.MaxCommitDelay)
	if err := b.MarkQueued(ctx, c.now()); err != nil {
		t.Fatal(err)
	}
	c.add(wake.QueueSettle)
	if again := b.Queue(ctx, qs.Token); !again.Idle {
		t.Fatalf("a covered mark changed the token: %+v", again)
	}
	if err := b.MarkQueued(ctx, c.now()); err != nil {
		t.Fatal(err)
	}
	if again := b.Queue(ctx, qs.Token); again.Idle {
		t.Fatal("a new queueing left runners idle")
	}
}

func TestVerdicts(t *testing.T) {
	objects := castest.New(t)
	c := &clock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	b := wake.New(objects, time.Minute)
	b.SetClock(c.now)
	ctx := context.Background()
	hash := []byte("0123456789abcdef0123456789abcdef")
	if _, ok := b.Verdict(ctx, hash); ok {
		t.Fatal("a verdict out of nothing")
	}
	if !b.NeedsVerdict(ctx, hash, "r1") {
		t.Fatal("no verdict needed where there is none")
	}
	if err := b.PutVerdict(ctx, hash, "r1"); err != nil {
		t.Fatal(err)
	}
	if id, ok := b.Verdict(ctx, hash); !ok || id != "r1" {
		t.Fatalf("verdict %q %v", id, ok)
	}
	if b.NeedsVerdict(ctx, hash, "r1") {
		t.Fatal("a fresh verdict is written again")
	}
	// Another process revokes: this one believes its copy for at most
	// the cache time.
	other := wake.New(objects, time.Minute)
	if err := other.DropVerdict(ctx, hash); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Verdict(ctx, hash); !ok {
		t.Fatal("the cached verdict was not kept (the test proves nothing)")
	}
	c.add(wake.VerdictCache)
	if _, ok := b.Verdict(ctx, hash); ok {
		t.Fatal("a verdict dropped elsewhere is believed past the cache time")
	}
	if err := b.PutVerdict(ctx, hash, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := b.DropVerdict(ctx, hash); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Verdict(ctx, hash); ok {
		t.Fatal("a dropped verdict is still believed here")
	}
	if err := b.PutVerdict(ctx, hash, "r1"); err != nil {
		t.Fatal(err)
	}
	c.add(wake.VerdictLife)
	if _, ok := b.Verdict(ctx, hash); ok {
		t.Fatal("an expired verdict is believed")
	}
}
