package store_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/localnet"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// lambdaPool is a pool shaped as a Lambda container's (lambdaapp.PoolOptions).
func lambdaPool(t *testing.T, url string) *store.Store {
	t.Helper()
	p, err := store.OpenPool(context.Background(), url, store.PoolOptions{MaxConns: 2, NoStatementCache: true,
		NoStartupSettings: true, IdleClose: 5 * time.Second, Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return store.New(p, store.Limits{})
}

// A query made while the early connection is being opened waits for it:
// the container opens one connection, not two.
func TestConnectEarlyOpensOneConnection(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)

	// The control: a connection opened in the background by a plain
	// Acquire does not stop a query from opening a second one.
	control := lambdaPool(t, url)
	go func() {
		if c, err := control.Pool().Acquire(ctx); err == nil {
			c.Release()
		}
	}()
	if _, _, err := control.ListRunners(ctx, store.Page{}); err != nil {
		t.Fatal(err)
	}
	if n := control.Pool().Stat().NewConnsCount(); n != 2 {
		t.Logf("control: the background connection was ready before the query (%d opened); the check below may pass by luck", n)
	}

	s := lambdaPool(t, url)
	s.ConnectEarly(func(err error) { t.Errorf("the early connection failed: %v", err) })
	if _, _, err := s.ListRunners(ctx, store.Page{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthenticateRunner(ctx, "frt_"+fmt.Sprintf("%043d", 0)); err == nil {
		t.Fatal("an unknown runner token was accepted")
	}
	st := s.Pool().Stat()
	if st.NewConnsCount() != 1 || st.TotalConns() != 1 {
		t.Fatalf("opened %d connections and holds %d, want 1 and 1", st.NewConnsCount(), st.TotalConns())
	}
}

// An early connection that fails is reported, and leaves the first query
// to try again and report its own error; nothing hangs.
func TestConnectEarlyFailureReachesTheQuery(t *testing.T) {
	port, err := localnet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := lambdaPool(t, fmt.Sprintf("postgres://forgeci:x@127.0.0.1:%d/forgeci?sslmode=disable&connect_timeout=3", port))
	failed := make(chan error, 1)
	s.ConnectEarly(func(err error) { failed <- err })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if _, _, err := s.ListRunners(ctx, store.Page{}); err == nil {
		t.Fatal("a query on an unreachable database succeeded")
	}
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("the early connection's failure was reported as nil")
		}
	case <-ctx.Done():
		t.Fatal("the early connection's failure was never reported")
	}
	if n := s.Pool().Stat().TotalConns(); n != 0 {
		t.Fatalf("the pool holds %d connections to a closed port", n)
	}
}

// A database that accepts and then says nothing (one resuming, or a lost
// packet): the query waits for the early connection to time out before it
// dials again itself, rather than dialling a second one beside it.
func TestConnectEarlySlowDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan time.Time, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- time.Now()
			defer c.Close() // held open, unanswered
		}
	}()
	s := lambdaPool(t, "postgres://forgeci:x@"+ln.Addr().String()+"/forgeci?sslmode=disable&connect_timeout=1")
	s.ConnectEarly(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := s.ListRunners(ctx, store.Page{}); err == nil {
		t.Fatal("a query on a silent database succeeded")
	}
	first, second := <-accepted, <-accepted
	if gap := second.Sub(first); gap < 900*time.Millisecond {
		t.Fatalf("the query dialled %s after the early connection, while it was still coming up", gap)
	}
	if len(accepted) != 0 {
		t.Fatalf("%d more connections", len(accepted))
	}
}
