package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pool is the store's connection pool. While ConnectEarly's connection is
// being opened, queries wait for it: the pool would otherwise open a
// second connection beside it, and the first query would pay the whole
// connection time anyway. The pgxpool is a named field, not embedded, so
// that only the methods below, which wait, can be called on it.
type pool struct {
	pgx   *pgxpool.Pool
	ready <-chan struct{} // nil: no early connection
}

func (p *pool) wait(ctx context.Context) {
	if p.ready == nil {
		return
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
	}
}

func (p *pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	p.wait(ctx)
	return p.pgx.Query(ctx, sql, args...)
}

func (p *pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	p.wait(ctx)
	return p.pgx.QueryRow(ctx, sql, args...)
}

func (p *pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	p.wait(ctx)
	return p.pgx.Exec(ctx, sql, args...)
}

func (p *pool) Begin(ctx context.Context) (pgx.Tx, error) {
	p.wait(ctx)
	return p.pgx.Begin(ctx)
}

func (p *pool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	p.wait(ctx)
	return p.pgx.Acquire(ctx)
}

// ConnectEarly opens the pool's first connection in the background. It is
// for a Lambda function every event of which queries: the connection
// (tens of milliseconds for a new database backend and its authentication)
// then overlaps the rest of the cold start and the event's delivery
// instead of following them. A function whose events may need no query
// (an idle poll answered from its hint, a scheduled pass with nothing
// due, a public route) must not call it: an idle stack holds no
// connection.
//
// The connection is bounded by the pool's connect timeout (OpenPool), not
// here: a waiter that gave up sooner would open a second connection while
// the first still came up. A query waits at most until its own context
// ends. A failure goes to failed (when not nil), and the first query tries
// again and reports its own. Call ConnectEarly before the store is used.
func (s *Store) ConnectEarly(failed func(error)) {
	ready := make(chan struct{})
	s.pool.ready = ready
	go func() {
		defer close(ready)
		c, err := s.pool.pgx.Acquire(context.Background())
		if err != nil {
			if failed != nil {
				failed(err)
			}
			return
		}
		c.Release()
	}()
}
