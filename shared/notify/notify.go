// Package notify delivers a project's notifications (run ended, branch
// failed, branch recovered) from the store's outbox to its hooks: an
// HMAC-signed JSON body, or a Slack-compatible one. Deliveries are leased;
// a failure is retried with backoff and ends FAILED, saying why; a lost
// answer is retried when the lease ends, and the receiver dedupes by the
// delivery's ID (X-ForgeCI-Delivery).
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// Deliverer sends due notifications.
type Deliverer struct {
	Store *store.Store
	Log   *slog.Logger
	// PublicURL is the dashboard's base URL, for links to runs.
	PublicURL string
	// AllowPrivate lets hooks reach loopback and private addresses (the
	// local stack and tests); otherwise a hook that resolves to one is
	// refused, so that a project admin cannot make ForgeCI call its own
	// network (the instance metadata service, the database).
	AllowPrivate bool
	// HTTP is the client (nil: one that refuses private addresses unless
	// AllowPrivate, follows no redirects and waits 10 s).
	HTTP *http.Client
	// Now is the clock of the signature's timestamp (nil: time.Now).
	Now func() time.Time
}

const (
	// A pass claims batches of batch deliveries for at most budget (it
	// shares the sweeper's minute), and only while the caller's deadline
	// leaves room for a whole batch (batchTime). A batch (one delivery per
	// hook, so a hook is sent no burst) is sent at once, each delivery
	// waiting at most sendTimeout, so one slow hook holds up no other; the
	// outcomes are recorded after. The lease outlasts a batch, so nothing
	// is sent twice while its attempt is under way.
	budget      = 20 * time.Second
	batch       = 5
	sendTimeout = 10 * time.Second
	batchTime   = sendTimeout + 5*time.Second
	lease       = 3 * batch * 15 * time.Second
	maxAttempts = 8
)

// backoff is the wait after attempt n fails: 30 s doubling, at most an
// hour.
func backoff(n int) time.Duration {
	return min(30*time.Second<<min(n, 10), time.Hour)
}

// Result counts one pass.
type Result struct{ Sent, Failed int }

// RunOnce delivers what is due, until none is, its budget is spent or
// ctx has too little time left for another batch.
func (d *Deliverer) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	client := d.client()
	start := time.Now()
	for time.Since(start) < budget && roomFor(ctx, batchTime) {
		work, err := d.Store.ClaimNotifications(ctx, batch, lease, maxAttempts)
		if err != nil || len(work) == 0 {
			return res, err
		}
		statuses, errs := d.sendBatch(ctx, client, work)
		// The attempts were made: each outcome is recorded, even if ctx
		// ended meanwhile or another's record failed.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var failed []error
		for i, w := range work {
			if errs[i] != nil {
				res.Failed++
			} else {
				res.Sent++
			}
			if derr := d.Store.NotificationDone(rctx, w, statuses[i], errs[i], backoff(w.Attempts), maxAttempts); derr != nil &&
				!errors.Is(derr, store.ErrCheckLeaseLost) {
				failed = append(failed, derr)
			}
		}
		cancel()
		if len(failed) > 0 {
			return res, errors.Join(failed...)
		}
	}
	return res, nil
}

// sendBatch sends work at once (the store claims one delivery per hook
// in a batch) and returns each one's status and error.
func (d *Deliverer) sendBatch(ctx context.Context, client *http.Client, work []store.NotifyWork) ([]int, []error) {
	statuses, errs := make([]int, len(work)), make([]error, len(work))
	var wg sync.WaitGroup
	for i, w := range work {
		wg.Go(func() { statuses[i], errs[i] = d.send(ctx, client, w) })
	}
	wg.Wait()
	return statuses, errs
}

// roomFor reports whether ctx is live and, if it has a deadline, at least
// d away from it.
func roomFor(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) >= d
}

// send posts one notification; it returns the receiver's status and, when
// it was not a 2xx, why (without the hook's URL, which may hold a token).
func (d *Deliverer) send(ctx context.Context, client *http.Client, w store.NotifyWork) (int, error) {
	body := d.body(w)
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(w.Secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, errors.New("the hook's URL does not make a request")
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "ForgeCI-Notify")
	h.Set("X-ForgeCI-Event", w.Event)
	h.Set("X-ForgeCI-Delivery", strconv.FormatInt(w.ID, 10))
	h.Set("X-ForgeCI-Timestamp", ts)
	h.Set("X-ForgeCI-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := client.Do(req)
	if errors.Is(err, errNotPublic) {
		// Not the address: it would map a project's private names for
		// its readers.
		return 0, fmt.Errorf("not delivered: %w", errNotPublic)
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may hold a token: not in the error people see
		}
		return 0, fmt.Errorf("not delivered: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the hook answered %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// Payload is a JSON notification's body.
type Payload struct {
	ID      int64  `json:"id"`
	Event   string `json:"event"`
	Project string `json:"project"`
	Run     struct {
		ID         string     `json:"id"`
		Number     int64      `json:"number"`
		State      string     `json:"state"`
		Trigger    string     `json:"trigger"`
		Ref        string     `json:"ref,omitempty"`
		SHA        string     `json:"sha,omitempty"`
		FinishedAt *time.Time `json:"finished_at,omitempty"`
		URL        string     `json:"url,omitempty"`
	} `json:"run"`
}

var eventWords = map[string]string{"run_ended": "ended", "branch_failed": "failed (the branch was passing)",
	"branch_recovered": "passed (the branch is fixed)"}

// body is w as its hook's format wants it.
func (d *Deliverer) body(w store.NotifyWork) []byte {
	var p Payload
	p.ID, p.Event, p.Project = w.ID, w.Event, w.Project
	p.Run.ID, p.Run.Number, p.Run.State, p.Run.Trigger = w.RunID, w.RunNumber, w.RunState, w.Trigger
	p.Run.Ref, p.Run.SHA, p.Run.FinishedAt = w.GitRef, w.GitSHA, w.FinishedAt
	if d.PublicURL != "" {
		p.Run.URL = strings.TrimSuffix(d.PublicURL, "/") + "/runs/" + w.RunID
	}
	if w.Format != "slack" {
		b, _ := json.Marshal(p) // strings, numbers and a time
		return b
	}
	// Slack reads <...> as links and mentions: text from runs is escaped
	// as its docs say (&, <, >).
	esc := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
	text := fmt.Sprintf("%s #%d %s: %s", esc(w.Project), w.RunNumber, w.RunState, eventWords[w.Event])
	if ref := strings.TrimPrefix(w.GitRef, "refs/heads/"); ref != "" {
		text += " on " + esc(ref)
	}
	if p.Run.URL != "" {
		text += " <" + p.Run.URL + "|view the run>"
	}
	b, _ := json.Marshal(map[string]string{"text": text})
	return b
}

// notPublic are the ranges beside loopback, private, link-local,
// multicast and unspecified that are no hook's: shared address space
// (CGNAT), "this network", benchmarking, reserved, NAT64 and 6to4 (which
// embed an IPv4 address of any kind).
var notPublic = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("240.0.0.0/4"), netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("64:ff9b:1::/48"), netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("fc00::/7")}

// public reports whether ip may be a hook's.
func public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() ||
		ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || !ip.IsValid() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// errNotPublic refuses a hook whose name resolves to an address that is
// not public.
var errNotPublic = errors.New("the hook's address is not a public one")

// client is d.HTTP, or one that refuses private addresses at dial time
// (after DNS, so a name that resolves inside is refused too) and follows
// no redirects.
func (d *Deliverer) client() *http.Client {
	if d.HTTP != nil {
		return d.HTTP
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !d.AllowPrivate && !public(ip) {
			return errNotPublic
		}
		return nil
	}}
	transport := &http.Transport{DialContext: dialer.DialContext, Proxy: nil, TLSHandshakeTimeout: 5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second, DisableKeepAlives: true}
	return &http.Client{Transport: transport, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
