package store

import (
	"context"
	"net"
	"sync/atomic"

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
	done  chan struct{}
	conn  net.Conn
	err   error
	taken atomic.Bool
}

// PreDial dials host:port (a name is resolved as pgx resolves it, and
// the first address is dialed) in the background.
func PreDial(host, port string) *PreDialed {
	p := &PreDialed{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			p.err = err
			return
		}
		var d net.Dialer // pgx's own dialer is a zero net.Dialer
		p.conn, p.err = d.DialContext(ctx, "tcp", net.JoinHostPort(addrs[0], port))
	}()
	return p
}

// dialFunc wraps next: the pool's first dial takes the pre-dialed
// connection when it is to the same address; any other dial, or a first
// one the pre-dial cannot serve (it failed, or reached another address),
// dials as next does. A connection not taken is closed.
func (p *PreDialed) dialFunc(next pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !p.taken.CompareAndSwap(false, true) {
			return next(ctx, network, addr)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			go p.discard()
			return nil, ctx.Err()
		}
		if p.err == nil && network == "tcp" && p.conn.RemoteAddr().String() == addr {
			return p.conn, nil
		}
		p.discard()
		return next(ctx, network, addr)
	}
}

func (p *PreDialed) discard() {
	<-p.done
	if p.conn != nil {
		p.conn.Close()
	}
}
