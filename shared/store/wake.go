package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/wake"
)

// The store notes in the wake-up hints (package wake) what its writes
// leave to do, before they commit: that jobs were queued (the queue hint
// idle runners poll), and that the scheduled functions have work (due
// notes): the sweeper when a lease is granted, a run ends (its
// notifications) or schedules change; the GitHub worker, where a GitHub
// App is configured (SetSCM), after any write; the collector is noted by
// the sweeper's passes, and for when an upload handed out ends. Without a board (SetBoard) nothing is noted and
// everything polls PostgreSQL as before.

// SetBoard gives the store the wake-up hints.
func (s *Store) SetBoard(b *wake.Board) { s.board = b }

// Board returns the wake-up hints (nil: none).
func (s *Store) Board() *wake.Board { return s.board }

type passKey struct{}

// InPass marks ctx as a pass of the scheduled work kind (package wake):
// its writes note work for the other kinds, and queued jobs, but not for
// its own (the pass notes its own next time), so that an idle pass, which
// commits nothing, does not wake itself forever.
func InPass(ctx context.Context, kind string) context.Context {
	return context.WithValue(ctx, passKey{}, kind)
}

// noteTx is the transaction inTx hands out: it remembers whether a
// statement queued jobs or left the sweeper work.
type noteTx struct {
	pgx.Tx
	queued, sweep, upload bool
}

// noteUpload records that tx handed out an upload: the collector is due
// when it ends (UploadLife), to free its room if it is never committed.
func noteUpload(tx pgx.Tx) {
	if n, ok := tx.(*noteTx); ok {
		n.upload = true
	}
}

// noteSweep records that tx left the sweeper work: a run ended (its
// notifications), schedules changed.
func noteSweep(tx pgx.Tx) {
	if n, ok := tx.(*noteTx); ok {
		n.sweep = true
	}
}

// SetSCM says a GitHub App is configured: writes then note the GitHub
// worker's work too (check notices follow job states).
func (s *Store) SetSCM(on bool) { s.scm = on }

// noteQueued records that tx queued jobs (a statement set some QUEUED).
// Every such statement runs in a transaction of inTx.
func noteQueued(tx pgx.Tx) {
	if n, ok := tx.(*noteTx); ok {
		n.queued = true
	}
}

// execer runs a statement: the transaction, or the connection, of the
// write a mark covers.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// mark notes, before a commit, the scheduled work of kinds a write left
// (but a pass's own kind) and, when queued, that jobs were queued. In a
// pass, notes it cannot make are owed, in q, the write's own transaction
// or connection, before it commits (see PayOwedNotes). It returns when it
// began, which bounds a lone statement (coveredBy) and tells a late commit
// (afterLateCommit); zero when the notes were owed: the write itself
// carries them, so neither applies.
func (s *Store) mark(ctx context.Context, q execer, queued bool, kinds ...string) (time.Time, error) {
	if s.board == nil {
		return time.Time{}, nil
	}
	started := s.board.Now()
	if s.scm && !slices.Contains(kinds, wake.SCM) {
		kinds = append(kinds, wake.SCM)
	}
	own, _ := ctx.Value(passKey{}).(string)
	if own != "" {
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == own })
	}
	err := s.markWork(ctx, started, queued, kinds...)
	if err == nil && s.board.Now().Sub(started) > s.board.CommitDelay()*4/5 {
		// The notes may no longer cover the commit (wake.MaxCommitDelay).
		err = errors.New("noting the work took too long")
	}
	if err != nil && own != "" {
		// A pass's write commits anyway (a lease must end whatever S3
		// does), with what it owes.
		owed := slices.Clone(kinds)
		if queued {
			owed = append(owed, owedQueue)
		}
		slices.Sort(owed) // rows locked in one order by every writer
		if _, oerr := q.Exec(ctx, oweNotesSQL, owed); oerr != nil {
			return started, fmt.Errorf("the pass can neither note its work nor owe it: %w", errors.Join(err, oerr))
		}
		return time.Time{}, nil
	}
	if err != nil {
		return started, domain.Errorf(domain.EUnavailable, "the control plane cannot note its work (nothing was changed, try again): %v", err)
	}
	return started, nil
}

// owedQueue is the wake_owed row of a queue hint owed.
const owedQueue = "queue"

// oweNotesSQL records notes a pass owes (kinds, or owedQueue), in the
// transaction of the write they were for.
const oweNotesSQL = `
INSERT INTO wake_owed (kind) SELECT unnest($1::text[])
ON CONFLICT (kind) DO UPDATE SET owed_at = clock_timestamp()`

const owedNotesSQL = `SELECT kind, owed_at FROM wake_owed ORDER BY kind`

// paidNotesSQL forgets the debt $1 made as of $2: one owed again since
// stays.
const paidNotesSQL = `DELETE FROM wake_owed WHERE kind = $1 AND owed_at = $2`

// PayOwedNotes makes the notes passes owe: the writes that owed them have
// committed, and a note made later still wakes what they left to do. It
// is durable, unlike a process's memory: the next pass of any kind, in
// any container, pays (a pass that could not pay fails, so its own notes
// stay and it runs again). One query when nothing is owed.
func (s *Store) PayOwedNotes(ctx context.Context) error {
	if s.board == nil {
		return nil
	}
	rows, err := s.pool.Query(ctx, owedNotesSQL) // in the order of kind
	if err != nil {
		return fmt.Errorf("owed notes: %w", err)
	}
	type debt struct {
		kind string
		at   time.Time
	}
	debts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (debt, error) {
		var d debt
		return d, row.Scan(&d.kind, &d.at)
	})
	if err != nil || len(debts) == 0 {
		return err
	}
	var kinds []string
	queued := false
	for _, d := range debts {
		if d.kind == owedQueue {
			queued = true
		} else {
			kinds = append(kinds, d.kind)
		}
	}
	if err := s.markWork(ctx, s.board.Now(), queued, kinds...); err != nil {
		return fmt.Errorf("pay owed notes: %w", err)
	}
	// One at a time, in the order of kind, as owing takes them.
	for _, d := range debts {
		if _, err := s.pool.Exec(ctx, paidNotesSQL, d.kind, d.at); err != nil {
			return fmt.Errorf("owed notes paid: %w", err)
		}
	}
	return nil
}

// markWork notes kinds due at at and, when queued, that jobs were queued.
func (s *Store) markWork(ctx context.Context, at time.Time, queued bool, kinds ...string) error {
	if err := s.board.Mark(ctx, at, kinds...); err != nil {
		return err
	}
	if queued {
		return s.board.MarkQueued(ctx, at)
	}
	return nil
}

// commitMarked notes tx's work (mark: outside a pass, a note that fails
// or comes too late to cover the commit fails the write), then commits it.
func (s *Store) commitMarked(ctx context.Context, tx *noteTx) error {
	var kinds []string
	if tx.sweep {
		kinds = append(kinds, wake.Sweep)
	}
	started, err := s.mark(ctx, tx, tx.queued, kinds...)
	if err != nil {
		return err
	}
	// The commit is not bounded: cutting it short would fail writes that
	// must land (a pass ending leases), and pgx's cancel would roll back
	// one still running its deferred checks. One that ends late is noted
	// again after it instead.
	err = tx.Commit(ctx)
	if !started.IsZero() {
		s.afterLateCommit(ctx, err, started, tx.queued, kinds)
	}
	if err != nil {
		return err
	}
	if tx.upload && s.board != nil {
		// After the commit, which it need not cover and must not delay
		// (the quota's lock is held till then); lost, it only keeps the
		// room longer: the upload counts until it is collected, and the
		// collector also runs daily after any activity. One note an hour:
		// the collector need not run more often for uploads.
		_ = s.board.DueAfter(ctx, wake.GC, s.board.Now().Add(UploadLife), time.Hour)
	}
	return nil
}

// afterLateCommit follows the commit of a write whose work was noted
// (started): one that ended past the note's cover (a slow commit: the
// queue hint may have settled, and a runner scanned, before it landed),
// or whose end the client did not see (the connection broke; the server
// may have committed), notes that work again from now, so that a runner
// or a pass that looked while the commit was in flight looks again:
// toward an extra look, never none. A commit the server makes more than
// MaxCommitDelay after its client saw it fail is not covered.
func (s *Store) afterLateCommit(ctx context.Context, err error, started time.Time, queued bool, kinds []string) {
	if rolledBack(err) {
		return
	}
	if err == nil && s.board.Now().Sub(started) <= s.board.CommitDelay()*4/5 {
		return
	}
	if err != nil && !slices.Contains(kinds, wake.Sweep) {
		// What the caller does after a commit (a run's job groups) it
		// skips after an error; the sweeper's pass settles that.
		kinds = append(slices.Clone(kinds), wake.Sweep)
	}
	_, _ = s.mark(context.WithoutCancel(ctx), s.pool, queued, kinds...)
}

// nextSweepSQL is when the sweeper must next look: the earliest lease
// expiry and the earliest notification due (or whose delivery lease
// ends), and now while a deployment waits to be gated again (one a pass
// could not: deployregate.go).
const nextSweepSQL = `
SELECT least((SELECT min(lease_expires_at) FROM jobs WHERE state = 'RUNNING'),
             (SELECT min(greatest(next_attempt_at, coalesce(lease_expires_at, next_attempt_at)))
              FROM notifications WHERE state = 'PENDING'),
             (SELECT now() WHERE EXISTS (` + staleAnySQL + `)))`

// NextSweep is when a lease can next expire or a notification is next
// due, on the caller's clock (zero: neither is pending).
func (s *Store) NextSweep(ctx context.Context) (time.Time, error) {
	return s.earliest(ctx, nextSweepSQL)
}

// TokenHash is a bearer token as the store keeps it (for verdicts).
func TokenHash(token string) []byte { return hashSecret(token) }

// nextSCMSQL is when the GitHub worker must next look: the earliest
// pending delivery or check notice due (or whose lease ends).
const nextSCMSQL = `
SELECT least((SELECT min(greatest(next_attempt_at, coalesce(lease_expires_at, next_attempt_at)))
              FROM scm_deliveries WHERE state = 'PENDING'),
             (SELECT min(greatest(next_attempt_at, coalesce(lease_expires_at, next_attempt_at)))
              FROM check_runs WHERE version > pushed_version))`

// NextSCM is when a GitHub delivery or check notice is next due, on the
// caller's clock (zero: none is pending).
func (s *Store) NextSCM(ctx context.Context) (time.Time, error) {
	return s.earliest(ctx, nextSCMSQL)
}

// coveredBy bounds a lone statement noted at started: a context that ends
// then cancels it before it can commit uncovered by its note.
func (s *Store) coveredBy(ctx context.Context, started time.Time) (context.Context, context.CancelFunc) {
	if s.board == nil || started.IsZero() {
		return context.WithCancel(ctx)
	}
	spent := s.board.Now().Sub(started) // on the board's clock, which tests set
	return context.WithTimeout(ctx, s.board.CommitDelay()*4/5-spent)
}

// afterFailure follows a lone statement noted before it that failed: the
// server may have committed it all the same (the client gave up at its
// context's end, qctx from coveredBy; the connection broke after the
// commit), past its note's cover. kind is noted due after on from now, by
// when whatever such a commit left is due (a lease ends at the latest its
// TTL after its statement began): toward an extra pass, never none.
func (s *Store) afterFailure(ctx context.Context, err error, kind string, after time.Duration) {
	if s.board == nil || rolledBack(err) {
		return
	}
	_ = s.board.Due(context.WithoutCancel(ctx), kind, s.board.Now().Add(after))
}

// rolledBack says whether err is the server's own error: it rolled the
// statement or transaction back, so nothing of it can commit later.
func rolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// nextUploadEndSQL is when the oldest upload handed out and not committed
// ends (UploadLife; queued objects of dropped blobs, at 'epoch', aside).
const nextUploadEndSQL = `
SELECT min(created_at) + make_interval(secs => $1) FROM uploads WHERE created_at > 'epoch'`

// NextUploadEnd is when the collector must next look for uploads never
// committed, on the caller's clock (zero: none is pending).
func (s *Store) NextUploadEnd(ctx context.Context) (time.Time, error) {
	return s.earliest(ctx, nextUploadEndSQL, UploadLife.Seconds())
}

// earliest runs a query of one nullable time (the database's): zero when
// NULL.
func (s *Store) earliest(ctx context.Context, query string, args ...any) (time.Time, error) {
	// The database's time is turned into the caller's clock, on which the
	// wake notes are written and read, as a span from its now: the two
	// clocks differ, and a lease's end noted as the database's time would
	// wake the sweeper late by the difference (the lease RUNNING so long).
	var in *float64 // seconds from the database's now
	if err := s.pool.QueryRow(ctx, `SELECT extract(epoch FROM t - now())::float8 FROM (`+query+`) AS q (t)`, args...).Scan(&in); err != nil {
		return time.Time{}, err
	}
	if in == nil {
		return time.Time{}, nil
	}
	return s.clockNow().Add(time.Duration(*in * float64(time.Second))), nil
}

// clockNow is the caller's now: the wake board's (which tests set), else
// this process's.
func (s *Store) clockNow() time.Time {
	if s.board != nil {
		return s.board.Now()
	}
	return time.Now()
}
