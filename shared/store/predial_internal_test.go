package store

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestPreDialLookupAnswersItsAddresses: the first lookup of the pre-dialed
// host answers PreDial's addresses in PreDial's order, whatever order the
// resolver gives now; later lookups, and another host's, are the
// resolver's.
func TestPreDialLookupAnswersItsAddresses(t *testing.T) {
	p := &PreDialed{host: "db.example", resolved: closedChan(), addrs: []string{"10.0.0.2", "10.0.0.1"}}
	next := func(_ context.Context, host string) ([]string, error) { return []string{"10.0.0.1", "10.0.0.2"}, nil }
	lookup := p.lookupFunc(next)
	ctx := context.Background()
	for i, want := range [][]string{{"10.0.0.2", "10.0.0.1"}, {"10.0.0.1", "10.0.0.2"}} {
		if got, err := lookup(ctx, "db.example"); err != nil || !slices.Equal(got, want) {
			t.Fatalf("lookup %d: %v %v, want %v", i+1, got, err, want)
		}
	}
	p2 := &PreDialed{host: "db.example", resolved: closedChan(), addrs: []string{"10.0.0.2"}}
	if got, _ := p2.lookupFunc(next)(ctx, "other.example"); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("another host: %v", got)
	}
	// Released (the cold start's addresses may be stale by the time the
	// pool connects): the resolver answers.
	p3 := &PreDialed{host: "db.example", resolved: closedChan(), done: closedChan(), addrs: []string{"10.0.0.2"}}
	p3.Release()
	if got, _ := p3.lookupFunc(next)(ctx, "db.example"); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("after the release: %v, want the resolver's", got)
	}
}

// TestPreDialElsewhereDoesNotWait: a first dial to another address than
// the pre-dial's dials at once, though the pre-dial has not ended (it may
// hang until its timeout: a failover moved the name, one of several
// addresses is unreachable).
func TestPreDialElsewhereDoesNotWait(t *testing.T) {
	dialed := errors.New("dialed by next")
	next := func(context.Context, string, string) (net.Conn, error) { return nil, dialed }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p := &PreDialed{host: "db.example", resolved: closedChan(), addrs: []string{"10.0.0.2"}, addr: "10.0.0.2:5432",
		done: make(chan struct{})}
	defer close(p.done)
	if _, err := p.dialFunc(next)(ctx, "tcp", "10.0.0.1:5432"); !errors.Is(err, dialed) {
		t.Fatalf("the first dial to another address: %v, want next's dial at once", err)
	}
	// A dial before the pre-dial's lookup ended: its own lookup was the
	// resolver's, and it does not wait for the pre-dial's.
	q := &PreDialed{host: "db.example", resolved: make(chan struct{}), done: make(chan struct{})}
	defer close(q.done)
	got := make(chan error, 1)
	go func() { _, err := q.dialFunc(next)(context.Background(), "tcp", "10.0.0.1:5432"); got <- err }()
	select {
	case err := <-got:
		if !errors.Is(err, dialed) {
			t.Fatalf("a dial before the pre-dial's lookup ended: %v, want next's dial", err)
		}
	case <-time.After(2 * time.Second):
		close(q.resolved)
		t.Fatal("a dial before the pre-dial's lookup ended waited for it")
	}
}
