package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pool is the store's connection pool. While ConnectEarly's connection is
// being opened, queries wait for it: the pool would otherwise open a
// second connection beside it, and the first query would pay the whole
// connection time anyway.
type pool struct {
	*pgxpool.Pool
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
	return p.Pool.Query(ctx, sql, args...)
}

func (p *pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	p.wait(ctx)
	return p.Pool.QueryRow(ctx, sql, args...)
}

func (p *pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	p.wait(ctx)
	return p.Pool.Exec(ctx, sql, args...)
}

func (p *pool) Begin(ctx context.Context) (pgx.Tx, error) {
	p.wait(ctx)
	return p.Pool.Begin(ctx)
}

func (p *pool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	p.wait(ctx)
	return p.Pool.Acquire(ctx)
}

// ConnectEarly opens the pool's first connection in the background. It is
// for a Lambda function every event of which queries: the connection
// (tens of milliseconds for a new database backend and its authentication)
// then overlaps the rest of the cold start and the event's delivery
// instead of following them. A function whose events may need no query
// (an idle poll answered from its hint, a scheduled pass with nothing
// due) must not call it: an idle stack holds no connection.
//
// A failure is left to the first query, which tries again and reports
// it. Call ConnectEarly before the store is used.
func (s *Store) ConnectEarly() {
	ready := make(chan struct{})
	s.pool.ready = ready
	go func() {
		defer close(ready)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := s.pool.Pool.Acquire(ctx); err == nil {
			c.Release()
		}
	}()
}
