package agent

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/mask"
)

// logAppender sends a job's output to the control plane in order, in
// batches, retrying, at byte offsets: a batch is resent at the same offset
// until it is acknowledged, so a lost answer never duplicates or reorders
// bytes (the server accepts an identical resend as a no-op).
//
// Output is masked as one stream before it is queued (see package mask):
// a secret written in pieces, across batches or flush ticks, is masked
// all the same. Only the end of the output that may begin a secret is
// held back (at most the longest pattern less one byte), until more
// output shows it is not one, or Close. Batches are cut from masked bytes
// and kept until acknowledged, so a resend repeats them exactly.
type logAppender struct {
	lease *client.Lease

	mu      sync.Mutex
	mask    *mask.Stream // writes into pending
	pending bytes.Buffer
	wake    chan struct{}
	done    chan struct{}
	closed  bool
	offset  int64
	failed  error
	every   time.Duration // how often queued output is sent
}

const (
	maxBatch   = 256 << 10
	flushEvery = 200 * time.Millisecond
)

func newLogAppender(h *client.Lease, redact []string) *logAppender {
	a := &logAppender{lease: h, wake: make(chan struct{}, 1), done: make(chan struct{}), every: flushEvery}
	// Values under mask.MinLen bytes are left out by mask.New.
	a.mask = mask.New(redact).NewStream(&a.pending)
	return a
}

// Write masks and queues output; it never blocks on the network.
func (a *logAppender) Write(p []byte) (int, error) {
	a.mu.Lock()
	_, _ = a.mask.Write(p) // into a bytes.Buffer: no error
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

// Close queues what the masker held back (the output has ended, so it
// can no longer begin a secret), flushes everything and waits, up to ctx.
func (a *logAppender) Close(ctx context.Context) error {
	a.mu.Lock()
	_ = a.mask.Close()
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
		case <-a.lease.Context().Done():
			return // lost or abandoned: nothing more may be sent
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
			if err := a.send(batch); err != nil {
				a.failed = err // a lost lease has ended the job already
				return
			}
		}
	}
}

// send appends one batch at the current offset, retrying until it lands
// or the lease ends: the log outlives the job's cancel or timeout (its
// last lines say why), not its lease.
func (a *logAppender) send(batch []byte) error {
	ctx := a.lease.Context()
	b := client.Backoff{Base: 250 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 0; ; attempt++ {
		next, err := a.lease.AppendLog(ctx, a.offset, batch)
		if err == nil {
			a.offset = next
			return nil
		}
		// A resend after a lost answer is accepted by the server as a
		// no-op, so only network errors and 5xx are worth another try.
		if !client.Retryable(err) || attempt > 20 || ctx.Err() != nil {
			return err
		}
		if b.Wait(ctx) != nil {
			return err
		}
	}
}
