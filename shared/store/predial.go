package store

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// PreDialed is a TCP connection to the database opened in the background
// at cold start, before the credentials are known (the database's secret
// is still being read, or an IAM token signed): the pool's first
// connection takes it instead of dialing, so that the TCP handshake and
// the server's start of a backend, which begins at the accept, overlap
// that read instead of following it. The connection carries nothing
// until the pool's first connection speaks on it (TLS, startup,
// authentication, all as with a connection it dialed itself).
type PreDialed struct {
	host     string
	resolved chan struct{} // closed once addrs and addr are set (or the lookup failed)
	addrs    []string      // the host's addresses, as the resolver gave them
	addr     string        // the one dialed: addrs[0] and the port
	done     chan struct{} // closed once conn or err is set
	conn     net.Conn
	err      error
	taken    atomic.Bool
}

// preDialedLife bounds how long a pre-dialed connection waits to be
// taken: one not taken by then (the configuration failed, the pool never
// dialed) is closed.
const preDialedLife = 10 * time.Second

// PreDial resolves host as pgx does and dials its first address at port,
// in the background.
func PreDial(host, port string) *PreDialed {
	p := &PreDialed{host: host, resolved: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err == nil && len(addrs) > 0 {
			p.addrs, p.addr = addrs, net.JoinHostPort(addrs[0], port)
		}
		close(p.resolved)
		if p.addr == "" {
			p.err = &net.DNSError{Err: "no address", Name: host}
			return
		}
		var d net.Dialer // pgx's own dialer is a zero net.Dialer
		p.conn, p.err = d.DialContext(ctx, "tcp", p.addr)
	}()
	time.AfterFunc(preDialedLife, p.Release)
	return p
}

// Release closes the connection unless it was taken: for a cold start
// that will not connect after all.
func (p *PreDialed) Release() {
	if p != nil && p.taken.CompareAndSwap(false, true) {
		go p.discard()
	}
}

// lookupFunc wraps next: the first lookup of the pre-dialed host, while
// the pre-dialed connection is still on offer, answers the addresses
// PreDial found, in their order, so that pgx dials the pre-dialed one
// first (a resolver may rotate a name's addresses between two lookups).
// Later lookups, any of another host, and one after the connection was
// released (its addresses may be stale by then) are next's.
func (p *PreDialed) lookupFunc(next pgconn.LookupFunc) pgconn.LookupFunc {
	var first atomic.Bool
	return func(ctx context.Context, host string) ([]string, error) {
		if host == p.host && !p.taken.Load() && first.CompareAndSwap(false, true) {
			select {
			case <-p.resolved:
				if p.addrs != nil {
					return p.addrs, nil
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, host)
	}
}

// dialFunc wraps next: the pool's first TCP dial takes the pre-dialed
// connection when it is to the same address and still open. A first dial
// to another address, or made before the pre-dial's lookup ended (then
// the dial's own lookup was not the pre-dial's), does not wait for it, and
// the pre-dialed connection is closed; every other dial is next's.
func (p *PreDialed) dialFunc(next pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network != "tcp" || !p.taken.CompareAndSwap(false, true) {
			return next(ctx, network, addr)
		}
		if !isClosed(p.resolved) || p.addr != addr {
			go p.discard()
			return next(ctx, network, addr)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			go p.discard() // whenever it comes
			return nil, ctx.Err()
		}
		if p.err != nil || !open(p.conn) {
			go p.discard()
			return next(ctx, network, addr)
		}
		return p.conn, nil
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *PreDialed) discard() {
	<-p.done
	if p.conn != nil {
		p.conn.Close()
	}
}
