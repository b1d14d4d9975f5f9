package store_test

import (
	"context"
	"fmt"
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
	s.ConnectEarly()
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

// An early connection that fails leaves the first query to try again and
// report the error; nothing hangs.
func TestConnectEarlyFailureReachesTheQuery(t *testing.T) {
	port, err := localnet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := lambdaPool(t, fmt.Sprintf("postgres://forgeci:x@127.0.0.1:%d/forgeci?sslmode=disable&connect_timeout=3", port))
	s.ConnectEarly()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	start := time.Now()
	if _, _, err := s.ListRunners(ctx, store.Page{}); err == nil {
		t.Fatal("a query on an unreachable database succeeded")
	}
	if took := time.Since(start); took > 7*time.Second {
		t.Fatalf("the query took %s to fail", took)
	}
	if n := s.Pool().Stat().TotalConns(); n != 0 {
		t.Fatalf("the pool holds %d connections to a closed port", n)
	}
}
