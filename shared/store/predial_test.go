package store_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// forwarder accepts TCP connections, counts them, and forwards each to
// target (when target is "", it holds them open and sends nothing; closed
// then hears of each its client closed). With dropFirst, it closes the
// first connection at once, and dropped hears of it.
type forwarder struct {
	ln              net.Listener
	accepted        atomic.Int32
	closed, dropped chan struct{}
	dropFirst       bool
}

func newForwarder(t *testing.T, target string) *forwarder {
	return startForwarder(t, target, false)
}

func startForwarder(t *testing.T, target string, dropFirst bool) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, closed: make(chan struct{}, 16), dropped: make(chan struct{}, 1), dropFirst: dropFirst}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if f.accepted.Add(1) == 1 && f.dropFirst {
				c.Close()
				f.dropped <- struct{}{}
				continue
			}
			go f.serve(c, target)
		}
	}()
	return f
}

func (f *forwarder) serve(c net.Conn, target string) {
	defer c.Close()
	if target == "" {
		_, _ = io.Copy(io.Discard, c)
		f.closed <- struct{}{}
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
}

func (f *forwarder) hostPort() (string, string) {
	h, p, _ := net.SplitHostPort(f.ln.Addr().String())
	return h, p
}

// TestPreDialedConnectionIsTaken: the pool's first connection takes the
// connection PreDial opened (the database's side sees one connection, not
// two) and works; the pool's next connection dials as usual.
func TestPreDialedConnectionIsTaken(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	fw := newForwarder(t, u.Host)
	host, port := fw.hostPort()
	u.Host = net.JoinHostPort(host, port)
	pre := store.PreDial(host, port)
	pool, err := store.OpenPool(ctx, u.String(), store.PoolOptions{MaxConns: 2, Lazy: true, PreDialed: pre})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	a, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release() // before the pool's Close, which waits for it
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fw.accepted.Load(); n != 1 {
		t.Fatalf("%d connections reached the database for the pool's first, want 1 (the pre-dialed one)", n)
	}
	b, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if err := b.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fw.accepted.Load(); n != 2 {
		t.Fatalf("%d connections reached the database for the pool's two, want 2", n)
	}
}

// TestPreDialedElsewhereIsClosed: a pre-dialed connection to another
// address than the pool's is not used, and is closed; the pool connects
// as usual.
func TestPreDialedElsewhereIsClosed(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	sink := newForwarder(t, "")
	pre := store.PreDial(sink.hostPort())
	pool, err := store.OpenPool(ctx, dbURL, store.PoolOptions{MaxConns: 1, Lazy: true, PreDialed: pre})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sink.closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("the pre-dialed connection to another address (%d accepted) is still open", sink.accepted.Load())
	}
}

// TestPreDialedClosedIsNotTaken: a pre-dialed connection the server closed
// meanwhile (a restart, a failover) is not handed to the pool, which
// dials afresh and connects.
func TestPreDialedClosedIsNotTaken(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	fw := startForwarder(t, u.Host, true)
	host, port := fw.hostPort()
	u.Host = net.JoinHostPort(host, port)
	pre := store.PreDial(host, port)
	<-fw.dropped
	pool, err := store.OpenPool(ctx, u.String(), store.PoolOptions{MaxConns: 1, PreDialed: pre})
	if err != nil {
		t.Fatalf("a pool whose pre-dialed connection was closed: %v", err)
	}
	pool.Close()
	if n := fw.accepted.Load(); n != 2 {
		t.Fatalf("%d connections accepted, want 2 (the pre-dialed one, closed, and the pool's own)", n)
	}
}

// TestPreDialedReleasedWithAPoolNotOpened: when the pool cannot be opened
// (its configuration is refused), the pre-dialed connection is closed.
func TestPreDialedReleasedWithAPoolNotOpened(t *testing.T) {
	sink := newForwarder(t, "")
	host, port := sink.hostPort()
	pre := store.PreDial(host, port)
	bad := "postgres://x@" + net.JoinHostPort(host, port) + "/db?sslmode=bogus"
	if _, err := store.OpenPool(context.Background(), bad, store.PoolOptions{Lazy: true, PreDialed: pre}); err == nil {
		t.Fatal("a pool with sslmode=bogus opened")
	}
	select {
	case <-sink.closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("the pre-dialed connection of a pool not opened (%d accepted) is still open", sink.accepted.Load())
	}
}
