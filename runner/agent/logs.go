package agent

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/domain"
)

// logAppender sends a job's output to the control plane in order, in
// batches, retrying, at byte offsets: a batch is resent at the same offset
// until it is acknowledged, so a lost answer never duplicates or reorders
// bytes (the server accepts an identical resend as a no-op).
type logAppender struct {
	c      *client.Client
	lease  domain.Lease
	redact [][]byte

	mu      sync.Mutex
	pending bytes.Buffer
	wake    chan struct{}
	done    chan struct{}
	closed  bool
	offset  int64
	lost    func() // called once when the lease is gone
	failed  error
	every   time.Duration // how often queued output is sent
}

const (
	maxBatch   = 256 << 10
	flushEvery = 200 * time.Millisecond
)

func newLogAppender(c *client.Client, l domain.Lease, redact []string, lost func()) *logAppender {
	a := &logAppender{c: c, lease: l, wake: make(chan struct{}, 1), done: make(chan struct{}), lost: lost, every: flushEvery}
	for _, r := range redact {
		if len(r) >= 4 {
			a.redact = append(a.redact, []byte(r))
		}
	}
	return a
}

// Write queues output; it never blocks on the network.
func (a *logAppender) Write(p []byte) (int, error) {
	a.mu.Lock()
	a.pending.Write(p)
	n := a.pending.Len()
	a.mu.Unlock()
	if n >= maxBatch {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// Close flushes what is queued and waits, up to ctx.
func (a *logAppender) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return a.failed
}

func (a *logAppender) loop() {
	defer close(a.done)
	t := time.NewTicker(a.every)
	defer t.Stop()
	for {
		select {
		case <-a.wake:
		case <-t.C:
		}
		for {
			a.mu.Lock()
			closed := a.closed
			batch := append([]byte(nil), a.pending.Next(maxBatch)...)
			a.mu.Unlock()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			if err := a.send(a.scrub(batch)); err != nil {
				a.failed = err
				if client.LostLease(err) {
					a.lost()
				}
				return
			}
		}
	}
}

func (a *logAppender) scrub(b []byte) []byte {
	for _, r := range a.redact {
		b = bytes.ReplaceAll(b, r, []byte("***"))
	}
	return b
}

// send appends one batch at the current offset, retrying until it lands.
func (a *logAppender) send(batch []byte) error {
	ctx := context.Background()
	delay := 250 * time.Millisecond
	for attempt := 0; ; attempt++ {
		next, err := a.c.AppendLog(ctx, a.lease, a.offset, batch)
		if err == nil {
			a.offset = next
			return nil
		}
		// A resend after a lost answer is accepted by the server as a
		// no-op, so only network errors and 5xx are worth another try.
		var e *client.Error
		if client.LostLease(err) || (errors.As(err, &e) && e.Status < 500) || attempt > 20 {
			return err
		}
		time.Sleep(delay)
		delay = min(delay*2, 5*time.Second)
	}
}
