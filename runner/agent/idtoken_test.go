package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// fakeControlPlane answers the id-token route as the control plane does:
// it wants the runner's token and the job's exact lease, and records
// what it was asked. The audience "gone" gets 409 lease_expired, and
// "canceling" 409 conflict (a job being canceled: its lease holds).
type fakeControlPlane struct {
	t     *testing.T
	lease domain.Lease
	mu    sync.Mutex
	asked []protocol.IDTokenRequest
	log   strings.Builder // what the socket's server logged
}

func (f *fakeControlPlane) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.Write(p)
}

func (f *fakeControlPlane) logged() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.String()
}

func (f *fakeControlPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, msg string) {
		var b protocol.ErrorBody
		b.Error.Code, b.Error.Message = code, msg
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(b)
	}
	if r.Method != http.MethodPost || r.URL.Path != protocol.JobPath(f.lease.JobID, protocol.RouteIDToken) {
		fail(http.StatusNotFound, domain.ENotFound, "no such route")
		return
	}
	if r.Header.Get("Authorization") != "Bearer runner-secret" {
		fail(http.StatusUnauthorized, domain.EUnauthorized, "not the runner's token")
		return
	}
	var req protocol.IDTokenRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Lease == nil {
		fail(http.StatusBadRequest, domain.EInvalid, "bad body")
		return
	}
	f.mu.Lock()
	f.asked = append(f.asked, req)
	f.mu.Unlock()
	switch {
	case *req.Lease != f.lease:
		fail(http.StatusConflict, domain.ELeaseMismatch, "not the job's lease")
	case req.Audience == "gone":
		fail(http.StatusConflict, domain.ELeaseExpired, "the lease has expired")
	case req.Audience == "canceling":
		fail(http.StatusConflict, domain.EConflict, "the job is being canceled")
	default:
		_ = json.NewEncoder(w).Encode(protocol.IDTokenResponse{Token: "jwt-for-" + req.Audience,
			ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)})
	}
}

func (f *fakeControlPlane) requests() []protocol.IDTokenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.IDTokenRequest(nil), f.asked...)
}

// startSocket serves a job's identity-token socket against a fake control
// plane; cancel ends the job's context.
func startSocket(t *testing.T) (*fakeControlPlane, *idTokenServer, context.CancelFunc) {
	t.Helper()
	f := &fakeControlPlane{t: t, lease: domain.Lease{RunID: "run-1", JobID: "job-1", RunnerID: "runner-1",
		LeaseID: "lease-1", Generation: 3}}
	cp := httptest.NewServer(f)
	t.Cleanup(cp.Close)
	h := client.New(cp.URL, "runner-secret").Hold(f.lease)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(f, nil))
	srv, err := serveIDTokens(ctx, filepath.Join(t.TempDir(), "0-lease-1.sock"), owner{uid: -1, gid: -1}, h, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return f, srv, cancel
}

func fetch(t *testing.T, socket, audience string) (protocol.IDTokenResponse, *domain.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, err := FetchIDToken(ctx, socket, audience)
	if err == nil {
		return tok, nil
	}
	var de *domain.Error
	if !errors.As(err, &de) {
		t.Fatalf("audience %q: not an answer: %v", audience, err)
	}
	return tok, de
}

func TestIDTokenSocket(t *testing.T) {
	f, srv, _ := startSocket(t)
	fi, err := os.Stat(srv.path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v: %v", fi.Mode(), err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
		t.Fatalf("socket owned by %d, not the runner's user", st.Uid)
	}

	tok, derr := fetch(t, srv.path, "sts.amazonaws.com")
	if derr != nil || tok.Token != "jwt-for-sts.amazonaws.com" || !tok.ExpiresAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("token %+v, %v", tok, derr)
	}
	asked := f.requests()
	if len(asked) != 1 || *asked[0].Lease != f.lease || asked[0].Audience != "sts.amazonaws.com" {
		t.Fatalf("the control plane was asked %+v", asked)
	}

	for _, aud := range []string{"", strings.Repeat("a", protocol.MaxAudience+1), "has space"} {
		if _, derr := fetch(t, srv.path, aud); derr == nil || derr.Status != http.StatusBadRequest || derr.Code != domain.EInvalid {
			t.Fatalf("audience %q: %v", aud, derr)
		}
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("bad audiences reached the control plane: %d requests", n)
	}

	// A job being canceled is refused, and keeps its lease.
	if _, derr := fetch(t, srv.path, "canceling"); derr == nil || derr.Status != http.StatusConflict || derr.Code != domain.EConflict {
		t.Fatalf("409 conflict not passed on: %v", derr)
	}
	if srv.lease.Ended() {
		t.Fatal("a job being canceled lost its lease")
	}

	// The control plane's refusal is passed on; the lease is then gone,
	// and no request reaches the control plane again.
	if _, derr := fetch(t, srv.path, "gone"); derr == nil || derr.Status != http.StatusConflict || derr.Code != domain.ELeaseExpired {
		t.Fatalf("409 not passed on: %v", derr)
	}
	if _, derr := fetch(t, srv.path, "after"); derr == nil || derr.Status != http.StatusConflict || derr.Code != domain.EJobFinished {
		t.Fatalf("after the lease was lost: %v", derr)
	}
	if n := len(f.requests()); n != 3 {
		t.Fatalf("%d requests reached the control plane, want 3", n)
	}

	srv.Close()
	if _, err := os.Lstat(srv.path); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived the job: %v", err)
	}
}

func TestIDTokenSocketRate(t *testing.T) {
	_, srv, _ := startSocket(t)
	for i := range idTokenPerMinute {
		if _, derr := fetch(t, srv.path, "aud"); derr != nil {
			t.Fatalf("request %d: %v", i, derr)
		}
	}
	if _, derr := fetch(t, srv.path, "aud"); derr == nil || derr.Status != http.StatusTooManyRequests {
		t.Fatalf("request %d of the minute: %v", idTokenPerMinute+1, derr)
	}
}

// TestIDTokenSocketEndsWithTheJob: once the job's context ends (its lease
// lost, canceled, timed out), the socket answers no more.
func TestIDTokenSocketEndsWithTheJob(t *testing.T) {
	f, srv, cancel := startSocket(t)
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := FetchIDToken(ctx, srv.path, "aud")
		stop()
		if err != nil && !domain.Is(err, domain.EJobFinished) && strings.Contains(err.Error(), "identity-token socket") {
			break // not even connected
		}
		if time.Now().After(deadline) {
			t.Fatalf("the socket still answers after the job ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("%d requests reached the control plane after the job ended", n)
	}
}

// TestIDTokenSocketRefusesOtherUsers: even through a socket anyone could
// open, a process of another user gets nothing (SO_PEERCRED).
func TestIDTokenSocketRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a client as another user needs root")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is not installed (make deps installs it)")
	}
	f, srv, _ := startSocket(t)
	// t.TempDir's two directories, for nobody to pass through.
	dir := filepath.Dir(srv.path)
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(srv.path, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(curl, "-sS", "--max-time", "5", "--unix-socket", srv.path, "http://localhost/token?audience=aud")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "jwt-for") {
		t.Fatalf("another user was answered: %s", out)
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("another user's request reached the control plane")
	}
	if log := f.logged(); !strings.Contains(log, "connection refused") || !strings.Contains(log, "peer_uid=65534") {
		t.Fatalf("not refused for its user (%v %s); the runner logged:\n%s", err, out, log)
	}
}

// TestAddTokenMaskedOnReturn: whatever the order concurrent AddToken
// calls finish in, each token is masked once its call returns (a step
// prints a token as soon as it gets it), and an expired one is let go.
func TestAddTokenMaskedOnReturn(t *testing.T) {
	a := newLogAppender(nil, nil)
	var wg sync.WaitGroup
	tokens := make([]string, 40)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("header.payload.signature-%03d-%s", i, strings.Repeat("s", 40))
		wg.Go(func() {
			a.AddToken(tokens[i], time.Now().Add(time.Minute))
			_, _ = a.Write([]byte("printed " + tokens[i] + "\n"))
		})
	}
	wg.Wait()
	a.mu.Lock()
	_ = a.mask.Close()
	out := a.pending.String()
	a.mu.Unlock()
	for _, tok := range tokens {
		if strings.Contains(out, tok[strings.LastIndexByte(tok, '.')+1:]) {
			t.Fatalf("token %s printed unmasked:\n%s", tok, out)
		}
	}
	if strings.Count(out, "printed header.payload.***") != len(tokens) {
		t.Fatalf("output:\n%s", out)
	}
	a.AddToken("h.p.expired-"+strings.Repeat("x", 40), time.Now().Add(-time.Second))
	a.AddToken("h.p.fresh-"+strings.Repeat("y", 40), time.Now().Add(time.Minute))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.tokens {
		if strings.HasPrefix(m.sig, "expired-") {
			t.Fatal("an expired token is still masked")
		}
	}
}
