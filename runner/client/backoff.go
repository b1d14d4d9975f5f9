package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the runner's one retry delay: exponential from Base to Max,
// with jitter so that runners cut off together do not return together,
// and cancellable.
type Backoff struct {
	Base, Max time.Duration
	next      time.Duration
}

// Wait sleeps for the next delay (between half and one and a half times
// it) and doubles it; it returns early with the context's cause when ctx
// is done.
func (b *Backoff) Wait(ctx context.Context) error {
	if b.next == 0 {
		b.next = b.Base
	}
	d := b.next/2 + time.Duration(rand.Int64N(int64(b.next)+1))
	b.next = min(b.next*2, b.Max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Reset starts again from Base.
func (b *Backoff) Reset() { b.next = 0 }

// Next is the delay the next Wait centres on.
func (b *Backoff) Next() time.Duration { return max(b.next, b.Base) }
