package wake

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/cas"
)

// Due notes: hints/due/<kind>/<slot in Unix ms, 15 digits>, empty. A note
// says kind must run at or after its slot. Writers of the same slot write
// the same key, so a burst of marks is one note.

func dueKey(kind string, slot time.Time) string {
	return fmt.Sprintf("%s%s/%015d", duePrefix, kind, slot.UnixMilli())
}

func slotOf(key string) (time.Time, bool) {
	i := strings.LastIndexByte(key, '/')
	ms, err := strconv.ParseInt(key[i+1:], 10, 64)
	return time.UnixMilli(ms), err == nil
}

func (b *Board) floor(t time.Time) time.Time { return t.Truncate(b.grain) }

// Mark notes that each kind must run now; started is when the caller
// began, and its transaction must commit within MaxCommitDelay of it. A
// process writes one note per kind and grain: the note of a slot covers
// every commit of that grain, since a pass deletes it only once
// slot+grain+MaxCommitDelay has passed (Pass).
func (b *Board) Mark(ctx context.Context, started time.Time, kinds ...string) error {
	for _, kind := range kinds {
		if err := b.markSlot(ctx, kind, kind, b.floor(started)); err != nil {
			return err
		}
	}
	return nil
}

// MarkEvery notes that kind must run now, at most once per period by this
// process (the slot is the period's start).
func (b *Board) MarkEvery(ctx context.Context, kind string, period time.Duration) error {
	return b.markSlot(ctx, kind+"/"+period.String(), kind, b.now().Truncate(period))
}

// markSlot writes kind's note of slot unless this process already wrote
// it (remembered under cacheKey).
func (b *Board) markSlot(ctx context.Context, cacheKey, kind string, slot time.Time) error {
	b.mu.Lock()
	done := b.marked[cacheKey].Equal(slot)
	b.mu.Unlock()
	if done {
		return nil
	}
	if err := b.put(ctx, dueKey(kind, slot), nil); err != nil {
		return fmt.Errorf("wake: mark %s: %w", kind, err)
	}
	b.mu.Lock()
	b.marked[cacheKey] = slot
	b.mu.Unlock()
	return nil
}

// Due notes that kind must run at or after at (its slot may be earlier:
// a pass that finds its work not due yet notes the exact time again).
func (b *Board) Due(ctx context.Context, kind string, at time.Time) error {
	if err := b.put(ctx, dueKey(kind, b.floor(at)), nil); err != nil {
		return fmt.Errorf("wake: note %s due: %w", kind, err)
	}
	return nil
}

// DueAfter notes that kind must run after at: at the first multiple of
// every (at least the grain) not before at+Skew, written once per slot by
// this process (at moves with each call: an upload's end).
func (b *Board) DueAfter(ctx context.Context, kind string, at time.Time, every time.Duration) error {
	every = max(every, b.grain)
	at = at.Add(Skew)
	slot := at.Truncate(every)
	if slot.Before(at) {
		slot = slot.Add(every)
	}
	return b.markSlot(ctx, "due/"+kind+"/"+every.String(), kind, slot)
}

// Pass runs fn if a note of kind is due, and says whether it did. fn does
// the work in PostgreSQL and returns when kind must next run (zero: not
// until something marks it). That time is noted before the notes that
// woke the pass are deleted, and only notes whose every transaction had
// committed before fn started are deleted: so a lost write, or a commit
// fn could not see, leaves a note, and the next invocation runs again.
//
// A pass's own writes must commit even when their notes are lost (a lease
// must end whatever S3 does): what they could not note is owed in
// PostgreSQL, and fn pays what is owed or fails (store.PayOwedNotes), so
// that the notes stay and the next invocation runs again.
func (b *Board) Pass(ctx context.Context, kind string, fn func(ctx context.Context) (time.Time, error)) (bool, error) {
	keys, err := b.obj.ListNotes(ctx, duePrefix+kind+"/", 1000)
	if err != nil {
		// Fail toward the work: the pass runs and deletes nothing.
		_, ferr := fn(ctx)
		return true, errors.Join(fmt.Errorf("wake: list %s notes: %w", kind, err), ferr)
	}
	start := b.now()
	var due []string
	for _, k := range keys {
		if slot, ok := slotOf(k); ok && !slot.After(start) {
			due = append(due, k)
		}
	}
	if len(due) == 0 {
		return false, nil
	}
	next, err := fn(ctx)
	if err != nil {
		return true, err
	}
	kept := ""
	if !next.IsZero() {
		if err := b.Due(ctx, kind, next); err != nil {
			return true, err
		}
		kept = dueKey(kind, b.floor(next))
	}
	var done []string
	for _, k := range due {
		slot, _ := slotOf(k)
		if k != kept && !slot.Add(b.grain+b.commitDelay+Skew).After(start) {
			done = append(done, k)
		}
	}
	if len(done) > 0 {
		if err := b.obj.Delete(ctx, done); err != nil {
			return true, fmt.Errorf("wake: delete %s notes: %w", kind, err)
		}
	}
	return true, nil
}

// Notes lists the due notes of kind (tests, and the bench).
func (b *Board) Notes(ctx context.Context, kind string) ([]time.Time, error) {
	keys, err := b.obj.ListNotes(ctx, duePrefix+kind+"/", 1000)
	var out []time.Time
	for _, k := range keys {
		if slot, ok := slotOf(k); ok {
			out = append(out, slot)
		}
	}
	return out, err
}

func isNotFound(err error) bool { return errors.Is(err, cas.ErrNotFound) }
