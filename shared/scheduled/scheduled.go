// Package scheduled holds the passes of ForgeCI's scheduled functions (the
// sweeper, the GitHub worker and the garbage collector). EventBridge
// invokes each on a fixed rate, but a pass touches PostgreSQL only when a
// wake-up hint (package wake) says its work may be due: while nothing
// happens, nothing connects.
package scheduled

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/forgeci/forgeci/shared/notify"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// Pass does one kind's work in PostgreSQL and returns when it must next
// run (zero: not until a write notes more).
type Pass func(ctx context.Context) (time.Time, error)

// Run is one invocation of kind: pass runs if a due note says so (always,
// without a board). ran says whether it did.
func Run(ctx context.Context, st *store.Store, kind string, pass Pass) (ran bool, err error) {
	b := st.Board()
	if b == nil {
		_, err := pass(ctx)
		return true, err
	}
	return b.Pass(store.InPass(ctx, kind), kind, paying(st, pass))
}

// RunKicked is an invocation that was asked for (the webhook's kick of the
// GitHub worker): the pass runs whatever the notes say, and its next time
// is noted; no note is deleted.
func RunKicked(ctx context.Context, st *store.Store, kind string, pass Pass) error {
	next, err := paying(st, pass)(store.InPass(ctx, kind))
	if err != nil || next.IsZero() || st.Board() == nil {
		return err
	}
	return st.Board().Due(ctx, kind, next)
}

// paying is pass, then the notes owed by it or by an earlier pass whose
// S3 writes failed (store.PayOwedNotes): a pass that cannot pay fails,
// and its notes stay for the next invocation, wherever it runs.
func paying(st *store.Store, pass Pass) Pass {
	return func(ctx context.Context) (time.Time, error) {
		next, err := pass(ctx)
		return next, errors.Join(err, st.PayOwedNotes(ctx))
	}
}

// regatePerPass bounds the runs whose deployments a sweeper pass gates
// again.
const regatePerPass = 100

// Sweeper is the sweeper's pass: lease expiry, schedules, notifications.
type Sweeper struct {
	Store    *store.Store
	Notifier *notify.Deliverer
	// Wake, when set, wakes the GitHub worker after schedules of GitHub
	// projects fired (their firings are deliveries, noted with them:
	// this is only sooner).
	Wake func(ctx context.Context) error
	Log  *slog.Logger
}

// Pass ends expired leases, fires due schedules, delivers notifications,
// and returns the earliest of: the next lease expiry, the next
// notification due, the next schedule slot.
func (w *Sweeper) Pass(ctx context.Context) (time.Time, error) {
	res, err := w.Store.Sweep(ctx)
	if err != nil || res.Aborted+res.Requeued > 0 {
		w.Log.Info("sweep", "aborted", res.Aborted, "requeued", res.Requeued, "err", err)
	}
	// Deployments whose environment's rules changed since they were let
	// through, left by the change or put back by a retry: gated again.
	// One run that cannot be gated again is its own (the claim's fence
	// holds its jobs): it does not fail the sweep.
	if n, rerr := w.Store.RegateStale(ctx, "", "", regatePerPass); rerr != nil || n > 0 {
		w.Log.Info("deployments gated again", "runs", n, "err", rerr)
	}
	// One project's schedule that cannot fire is its own (the slot says
	// why): it does not fail the sweep.
	fired, ferr := w.Store.FireSchedules(ctx)
	if ferr != nil || fired.Fired+fired.Skipped > 0 {
		w.Log.Info("schedules", "fired", fired.Fired, "skipped", fired.Skipped, "left", fired.Left, "err", ferr)
	}
	if fired.Fired > 0 && w.Wake != nil {
		_ = w.Wake(ctx)
	}
	var nerr error
	if w.Notifier != nil {
		// Each failure is its own (retried, then shown FAILED).
		var sent notify.Result
		sent, nerr = w.Notifier.RunOnce(ctx)
		if nerr != nil || sent.Sent+sent.Failed > 0 {
			w.Log.Info("notifications", "sent", sent.Sent, "failed", sent.Failed, "err", nerr)
		}
	}
	if err != nil {
		return time.Time{}, err
	}
	next, qerr := w.Store.NextSweep(ctx)
	if qerr != nil {
		return time.Time{}, qerr
	}
	if ferr != nil {
		return time.Time{}, ferr // a firing failed or was left: run again, keep the notes
	}
	if nerr != nil {
		return time.Time{}, nerr
	}
	// The collector's work follows activity, and the sweeper runs only
	// after some: note the collector due, once a day at most.
	if b := w.Store.Board(); b != nil {
		if err := b.MarkEvery(ctx, wake.GC, 24*time.Hour); err != nil {
			return time.Time{}, err
		}
	}
	return earliest(next, fired.Next), nil
}

// GC is the collector's pass. The sweeper notes it due once a day after
// activity, and an upload handed out when it ends; it runs again at once
// while it leaves work, when the oldest upload left uncommitted ends, and
// a day later while it finds some.
func GC(st *store.Store, budget time.Duration, log *slog.Logger) Pass {
	return func(ctx context.Context) (time.Time, error) {
		res, err := st.CollectGarbage(ctx, store.GCOptions{Budget: budget})
		if err != nil {
			return time.Time{}, err
		}
		if res != (store.GCResult{Done: true}) {
			log.Info("gc", "approvals_expired", res.ApprovalsExpired, "runs", res.Runs, "deliveries", res.Deliveries+res.PushBodies, "caches", res.CachesIdle+res.CachesOverQuota, "uploads", res.Uploads,
				"blobs", res.Blobs, "blob_bytes", res.BlobBytes, "done", res.Done)
		}
		if !res.Done {
			return time.Now(), nil
		}
		// When the oldest upload left uncommitted ends (a slot later: the
		// note is of the slot it falls in), so that its room is freed
		// then even if its own note was lost.
		next, err := st.NextUploadEnd(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if b := st.Board(); b != nil && !next.IsZero() {
			next = next.Add(b.Grain())
		}
		// Again a day later while it finds work, so that what activity
		// left (idle caches) goes even if no more comes.
		if res != (store.GCResult{Done: true}) {
			next = earliest(next, time.Now().Add(24*time.Hour))
		}
		return next, nil
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}
