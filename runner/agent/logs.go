package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/mask"
	"github.com/forgeci/forgeci/shared/protocol"
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
	lease      *client.Lease
	set        *mask.Set     // masks step names too
	redact     []string      // the values set masks
	tokens     []maskedToken // and the identity tokens' signatures
	added      []string      // and what the steps added (::add-mask::)
	addedForms int           // bytes of their masked forms
	building   sync.Mutex    // one masker built at a time (install)
	maskGen    int           // counts the sets built
	maskIn     int           // the generation of the set in place

	mu      sync.Mutex
	mask    *mask.Stream // writes into lines, which writes into pending
	lines   lineMarks
	pending bytes.Buffer
	events  []protocol.StepEvent // step events not yet sent
	started map[int]protocol.StepEvent
	wake    chan struct{}
	done    chan struct{}
	closed  bool
	// stopped: loop has returned (lease ended, or an append was refused,
	// as 413 past the log cap), so nothing more will be sent.
	stopped bool
	// truncated: output past maxHeld was dropped; the log says so once.
	truncated bool
	offset    int64 // acknowledged: where the next batch starts
	failed    error
	every     time.Duration // how often queued output is sent
}

const (
	maxBatch   = 256 << 10
	flushEvery = 200 * time.Millisecond
	// maxHeld bounds the output held unsent: a step's output is hostile
	// and the control plane may be slow or refuse more (413 at the log
	// cap), and the runner runs as root.
	maxHeld = 4 << 20
)

// truncatedLine ends a log whose output came faster than it was sent.
var truncatedLine = fmt.Sprintf("==> log truncated: the rest of the output is dropped (more than %d MiB was waiting to be sent)\n", maxHeld>>20)

func newLogAppender(h *client.Lease, redact []string) *logAppender {
	a := &logAppender{lease: h, wake: make(chan struct{}, 1), done: make(chan struct{}), every: flushEvery,
		started: map[int]protocol.StepEvent{}}
	// Values under mask.MinLen bytes are left out by mask.New.
	a.redact = redact
	a.set = mask.New(redact)
	a.lines = lineMarks{dst: &a.pending, start: true, now: time.Now}
	a.mask = a.set.NewStream(&a.lines)
	return a
}

// maxMaskedTokens bounds the identity tokens a job's log masks at once:
// those not yet expired, at most this many of the newest. Each rebuilds
// the masker, so an unbounded list would let a step make the runner spend
// ever more memory and time; the server hands out no more live at once.
const maxMaskedTokens = protocol.MaxLiveIDTokens

// maskedToken is a token's signature, masked until it expires.
type maskedToken struct {
	sig     string
	expires time.Time
}

// AddToken masks an identity token just handed to the job's steps, from
// now on: its signature, without which the token is worth nothing (its
// header and claims are no secret), until it expires. When AddToken
// returns its token is masked (install).
func (a *logAppender) AddToken(token string, expires time.Time) {
	sig := token[strings.LastIndexByte(token, '.')+1:]
	a.mu.Lock()
	now := time.Now()
	live := a.tokens[:0]
	for _, t := range a.tokens {
		if t.expires.After(now) {
			live = append(live, t)
		}
	}
	live = append(live, maskedToken{sig, expires})
	a.tokens = slices.Clone(live[max(0, len(live)-maxMaskedTokens):])
	a.install()
}

// Bounds of the values a job's steps may add to the masks
// (::add-mask::): each add rebuilds the masker from every value's forms
// (base64, URL and JSON escapes, hex: about 60 bytes of patterns a byte
// of value), and the runner runs as root, outside the job's cgroup. So
// the forms are counted, not the values: at most maxAddedMaskForms
// bytes of them for the job, a rebuild of well under a second.
const (
	maxAddedMasks     = 100
	maxAddedMaskForms = 512 << 10
)

// AddMask masks value from now on, as a secret (a step asked with
// ::add-mask::); when it returns, the value is masked. It refuses a value
// too short to mask, one past the job's bounds, and any once the log is
// closed.
func (a *logAppender) AddMask(value string) error {
	if len(value) < mask.MinLen {
		return fmt.Errorf("a value under %d bytes cannot be masked", mask.MinLen)
	}
	// A value's forms are at least 4 times its bytes (its base64 twice,
	// its hex): what cannot fit is refused before they are made.
	a.mu.Lock()
	err := a.maskRoom(4 * len(value))
	a.mu.Unlock()
	if err != nil {
		return err
	}
	forms := 0
	for _, f := range mask.Forms(value) {
		forms += len(f)
	}
	a.mu.Lock()
	if err := a.maskRoom(forms); err != nil {
		a.mu.Unlock()
		return err
	}
	a.added, a.addedForms = append(a.added, value), a.addedForms+forms
	a.install()
	return nil
}

// maskRoom says why a value of forms bytes of masked forms cannot be
// added now (nil: it can). Called with a.mu held.
func (a *logAppender) maskRoom(forms int) error {
	switch {
	case a.closed || a.stopped:
		return errors.New("the job's log is closed")
	case len(a.added) >= maxAddedMasks || a.addedForms+forms > maxAddedMaskForms:
		return fmt.Errorf("the job's steps have added %d values to the masks (%d bytes of masked forms), the most a job may (%d, %d bytes)",
			len(a.added), a.addedForms, maxAddedMasks, maxAddedMaskForms)
	}
	return nil
}

// install builds the masker of every value now and puts it in place,
// unless a set built later is already there: each set holds every value
// added before it. Called with a.mu held, which it releases. The masker
// is built outside a.mu, so writes go on meanwhile, and one build at a
// time (a.building): concurrent adds wait rather than each hold a set of
// their own in memory, and one that finds a later build installed has
// nothing to do.
func (a *logAppender) install() {
	a.maskGen++
	gen := a.maskGen
	a.mu.Unlock()
	a.building.Lock()
	defer a.building.Unlock()
	a.mu.Lock()
	if a.maskIn >= gen {
		a.mu.Unlock()
		return
	}
	gen, values := a.maskGen, slices.Concat(a.redact, a.added)
	for _, t := range a.tokens {
		values = append(values, t.sig)
	}
	a.mu.Unlock()
	set := mask.New(values)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.maskIn = gen
	a.set = set
	a.mask.Switch(set)
}

// maskSet is the set the log masks with now (read under the lock: a token
// may be added meanwhile).
func (a *logAppender) maskSet() *mask.Set {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.set
}

// Write masks and queues output; it never blocks on the network. Past
// maxHeld unsent, the rest of the output is dropped, as the server drops
// what passes the log cap; once nothing more can be sent, all of it is.
func (a *logAppender) Write(p []byte) (int, error) {
	a.mu.Lock()
	switch {
	case a.stopped || a.truncated:
		// dropped
	case a.pending.Len()+a.mask.Held()+len(p) > maxHeld:
		a.truncated = true
		a.endLine()
		_, _ = a.mask.Write([]byte(truncatedLine)) // a few bytes past the bound, once
	default:
		_, _ = a.mask.Write(p) // into a bytes.Buffer: no error
	}
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
	defer a.stop()
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
			req := a.cut(batch)
			a.mu.Unlock()
			if len(batch) == 0 && len(req.Steps) == 0 {
				if closed {
					return
				}
				break
			}
			if err := a.send(req); err != nil {
				a.failed = err // a lost lease has ended the job already
				return
			}
		}
	}
}

// stop records that nothing more will be sent and frees what was held.
func (a *logAppender) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	a.pending = bytes.Buffer{}
	a.lines.marks = nil
}

// cut is the append of batch, the next bytes from a.offset: with the
// marks of its lines and the step events whose offsets it reaches.
func (a *logAppender) cut(batch []byte) logBatch {
	end := a.offset + int64(len(batch))
	b := logBatch{Data: batch, Times: a.lines.take(a.offset, batch)}
	var rest []protocol.StepEvent
	for _, e := range a.events {
		if e.LogOffset <= end && (e.EndOffset == nil || *e.EndOffset <= end) {
			b.Steps = append(b.Steps, e)
		} else {
			rest = append(rest, e)
		}
	}
	a.events = rest
	return b
}

// logBatch is one append's data, marks and step events.
type logBatch struct {
	Data  []byte
	Times []protocol.LineTime
	Steps []protocol.StepEvent
}

// send appends one batch at the current offset, retrying until it lands
// or the lease ends: the log outlives the job's cancel or timeout (its
// last lines say why), not its lease.
func (a *logAppender) send(batch logBatch) error {
	ctx := a.lease.Context()
	b := client.Backoff{Base: 250 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 0; ; attempt++ {
		next, err := a.lease.AppendLogWith(ctx, a.offset, batch.Data, batch.Times, batch.Steps)
		if err == nil {
			a.mu.Lock()
			a.offset = next
			a.mu.Unlock()
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

// stepStarted records that step index (named name) starts here: its
// section of the log begins at the "==> step" line written next. What
// the masker held back is passed on first (the step's output before has
// ended), so the offset is exact.
func (a *logAppender) stepStarted(index int, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.endLine()
	e := protocol.StepEvent{Index: index, Name: truncateName(a.set.String(name)), LogOffset: a.lines.written,
		StartedAt: time.Now().UTC()}
	a.started[index] = e
	a.events = append(a.events, e)
}

// stepEnded records the end of step index, started before, with its
// exit code (nil when it never ran) and conclusion, and its name as it
// ran ("" keeps the one it started with: a name's expressions are
// evaluated once the step starts).
func (a *logAppender) stepEnded(index int, name string, exit *int, conclusion string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.started[index]
	if !ok {
		return
	}
	if name != "" {
		e.Name = truncateName(a.set.String(name))
	}
	a.endLine()
	end, now := a.lines.written, time.Now().UTC()
	if now.Before(e.StartedAt) {
		now = e.StartedAt // the clock stepped back
	}
	e.EndOffset, e.FinishedAt, e.ExitCode, e.Conclusion = &end, &now, exit, conclusion
	a.events = append(a.events, e)
}

// endLine passes on what the masker held back (the output before has
// ended) and ends its last line, so that a section starts at a line.
func (a *logAppender) endLine() {
	_ = a.mask.Close()
	if !a.lines.start && a.lines.written > 0 {
		_, _ = a.mask.Write([]byte("\n"))
		_ = a.mask.Close()
	}
}

// truncateName is a step's name as the protocol takes it: 1 to
// MaxStepNameBytes of valid UTF-8.
func truncateName(s string) string {
	if s == "" {
		return "step"
	}
	return cut(s, protocol.MaxStepNameBytes)
}
