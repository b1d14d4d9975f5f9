package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// The identity-token socket (docs/runner-protocol.md, The runner's
// side): a job whose pipeline asked for identity tokens (id_token) gets,
// for its lifetime only, a Unix socket that only its user may open. A
// step asks it GET /token?audience=X; the runner asks the control plane
// with its own token and the job's lease, which the step never sees, and
// answers {"token", "expires_at"} or the control plane's error.
const (
	// idTokenConns bounds the connections served at once (so the
	// requests in flight); more wait in the socket's backlog.
	idTokenConns = 4
	// idTokenPerMinute bounds a job's requests: each one is a signed,
	// recorded token on the control plane, which grants an attempt as
	// many a minute (store.MaxIDTokensPerMinute).
	idTokenPerMinute = 30
	// idTokenCallTimeout bounds one request to the control plane, its
	// retries included.
	idTokenCallTimeout = 30 * time.Second
	// maxSocketPath is what sun_path holds, less its NUL.
	maxSocketPath = 107
	// eTooManyRequests is the code of a request over the job's rate.
	eTooManyRequests = "too_many_requests"
)

// startIDTokens serves the job's identity-token socket, reachable by its
// steps, and puts the runner where they can run it; it returns what
// closes the socket. The socket is <work dir>/id-token/<slot>-<lease>.sock:
// short, because a socket's path is at most 107 bytes (the attempt's own
// directory is longer), and in a directory of the runner's that slot users
// may pass through but not list.
func (j *job) startIDTokens(slot int) (func(), error) {
	dir, err := filepath.Abs(filepath.Join(j.a.cfg.WorkDir, "id-token"))
	if err != nil {
		return nil, err
	}
	perm := os.FileMode(0o700)
	if j.a.cfg.Isolation.Mode() != isolate.None {
		perm = 0o711
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if err := os.Chmod(dir, perm); err != nil {
		return nil, err
	}
	bin, err := j.box.Executable()
	if err != nil {
		return nil, fmt.Errorf("the runner's executable for the steps: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%d-%.8s.sock", slot, j.claim.Lease.LeaseID))
	log := j.a.cfg.Log.With("job_id", j.claim.Lease.JobID, "socket", path)
	srv, err := serveIDTokens(j.ctx, path, owner{uid: j.box.Owner(), gid: j.box.OwnerGroup()}, j.lease, log, j.logs.AddToken)
	if err != nil {
		return nil, err
	}
	j.box.Share(path)
	// The server's URL too: where a step checks what it was given (the
	// issuer's discovery document and introspection, when the server is
	// the issuer, as in the local stack).
	j.idTokenEnv = map[string]string{IDTokenSocketEnv: path, RunnerBinEnv: bin, ServerURLEnv: withoutUserinfo(j.a.cfg.Client.Server)}
	return srv.Close, nil
}

// withoutUserinfo is a URL without the user and password an operator may
// have put in it for a proxy: steps must not see them.
func withoutUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User = nil
	return u.String()
}

// idTokenServer serves one job's identity-token socket.
type idTokenServer struct {
	path    string
	lease   *client.Lease
	allowed []int // peer uids served: the job's user and root
	log     *slog.Logger
	srv     *http.Server
	// ctx ends with the job or Close: no request is served after.
	ctx    context.Context
	cancel context.CancelFunc
	conns  chan struct{} // one token per open connection
	served chan struct{} // closed when Serve has returned

	mu     sync.Mutex
	closed bool
	recent []time.Time // when the requests of the last minute came
	mask   func(token string, expires time.Time)
	active sync.WaitGroup
}

// serveIDTokens listens on path, a socket only uid (-1: the runner's own
// user) may open, until ctx ends or Close, and answers with tokens asked
// for under lease. Each token is handed to mask (the job's log) before
// the step gets it, so that a step that prints it shows ***.
func serveIDTokens(ctx context.Context, path string, who owner, lease *client.Lease, log *slog.Logger,
	mask func(token string, expires time.Time)) (*idTokenServer, error) {
	uid := who.uid
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("the socket path %s is over the %d bytes a Unix socket may have: choose a shorter --work-dir", path, maxSocketPath)
	}
	_ = os.Remove(path) // left by a runner that died; the name is this slot's
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := ownSocket(path, who); err != nil {
		ln.Close()
		return nil, err
	}
	if uid < 0 {
		uid = os.Geteuid()
	}
	// Only the job's user: no helper of the runner's connects as root,
	// and a setuid program a step ran would.
	s := &idTokenServer{path: path, lease: lease, allowed: []int{uid}, log: log, mask: mask,
		conns: make(chan struct{}, idTokenConns), served: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      idTokenCallTimeout + 10*time.Second,
		IdleTimeout:       5 * time.Second,
		MaxHeaderBytes:    8 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(&peerListener{UnixListener: ln, s: s})
	}()
	// The job's end (lease lost, canceled, timed out) closes it at once.
	context.AfterFunc(s.ctx, func() { _ = s.srv.Close() })
	return s, nil
}

// owner is whom a job's socket is for: a slot's user and group (uid -1:
// the runner's own user).
type owner struct{ uid, gid int }

// ownSocket makes the socket usable by the slot's user alone: root keeps
// it, its group is the slot user's, mode 0660, so the step can connect but
// not chmod it open to others (the peer's uid is checked as well). With no
// slot user it stays the runner's, mode 0600.
func ownSocket(path string, who owner) error {
	if who.uid < 0 {
		return os.Chmod(path, 0o600)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return err
	}
	return os.Chown(path, 0, who.gid)
}

// Close stops serving, waits for the requests in flight (their calls to
// the control plane are canceled) and removes the socket.
func (s *idTokenServer) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	_ = s.srv.Close()
	<-s.served
	s.active.Wait()
	_ = os.Remove(s.path)
}

// enter admits a request while the job holds its lease; the caller calls
// s.active.Done when it admitted one.
func (s *idTokenServer) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ctx.Err() != nil || s.lease.Ended() {
		return false
	}
	s.active.Add(1)
	return true
}

// allow counts a request against the job's rate.
func (s *idTokenServer) allow(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recent = slices.DeleteFunc(s.recent, func(t time.Time) bool { return now.Sub(t) >= time.Minute })
	if len(s.recent) >= idTokenPerMinute {
		return false
	}
	s.recent = append(s.recent, now)
	return true
}

func (s *idTokenServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path != "/token":
		writeError(w, http.StatusNotFound, domain.ENotFound, "this socket serves GET /token?audience=AUDIENCE")
		return
	case r.Method != http.MethodGet:
		writeError(w, http.StatusMethodNotAllowed, domain.EInvalid, "use GET /token?audience=AUDIENCE")
		return
	}
	if !s.enter() {
		writeError(w, http.StatusConflict, domain.EJobFinished, "the job has ended: no more identity tokens")
		return
	}
	defer s.active.Done()
	aud := r.URL.Query().Get("audience")
	if err := (&protocol.IDTokenRequest{Audience: aud}).Validate(); err != nil {
		writeError(w, http.StatusBadRequest, domain.EInvalid, errorMessage(err))
		return
	}
	if !s.allow(time.Now()) {
		writeError(w, http.StatusTooManyRequests, eTooManyRequests,
			fmt.Sprintf("at most %d identity tokens a minute per job", idTokenPerMinute))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), idTokenCallTimeout)
	defer cancel()
	tok, err := s.lease.IDToken(ctx, aud)
	if err != nil {
		s.fail(w, err)
		return
	}
	if s.mask != nil {
		s.mask(tok.Token, tok.ExpiresAt)
	}
	writeJSON(w, http.StatusOK, tok)
}

// fail passes the control plane's answer on (status, code, message), or
// says it could not be had.
func (s *idTokenServer) fail(w http.ResponseWriter, err error) {
	var de *domain.Error
	switch {
	case errors.As(err, &de) && de.Status != 0:
		writeError(w, de.Status, de.Code, de.Message)
	case s.ctx.Err() != nil:
		writeError(w, http.StatusConflict, domain.EJobFinished, "the job has ended: no more identity tokens")
	default:
		s.log.Warn("identity token not had", "err", err)
		writeError(w, http.StatusServiceUnavailable, domain.EUnavailable, "the control plane could not be asked: "+err.Error())
	}
}

// errorMessage is err's message without its code.
func errorMessage(err error) string {
	var de *domain.Error
	if errors.As(err, &de) {
		return de.Message
	}
	return err.Error()
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var b protocol.ErrorBody
	b.Error.Code, b.Error.Message = code, message
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// peerListener accepts at most idTokenConns connections at once, and only
// from the job's user or root (SO_PEERCRED): defense in depth beyond the
// socket's owner and mode.
type peerListener struct {
	*net.UnixListener
	s       *idTokenServer
	refused int // connections refused (Accept is called from one goroutine)
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.s.conns <- struct{}{}:
		case <-l.s.ctx.Done():
			return nil, net.ErrClosed
		}
		c, err := l.AcceptUnix()
		if err != nil {
			<-l.s.conns
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && slices.Contains(l.s.allowed, uid) {
			return &heldConn{Conn: c, free: l.s.conns}, nil
		}
		// Said a few times a job, not once per attempt: another local
		// user must not be able to flood the runner's log.
		if l.refused++; l.refused <= 5 {
			l.s.log.Warn("identity-token socket: connection refused", "peer_uid", uid, "err", err)
		}
		c.Close()
		<-l.s.conns
	}
}

// heldConn gives its connection's place back when it is closed.
type heldConn struct {
	net.Conn
	once sync.Once
	free chan struct{}
}

func (c *heldConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.free })
	return err
}
