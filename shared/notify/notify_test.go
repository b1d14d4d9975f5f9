package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/forgeci/forgeci/shared/notify"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// receiver is a hook's server: it checks each delivery's signature and
// keeps what it got; fail makes it answer 500, drop lose its answer.
type receiver struct {
	secret     string
	mu         sync.Mutex
	got        []string // event of each valid delivery, by arrival
	ids        []string
	bad        int
	fail, drop bool
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	mac := hmac.New(sha256.New, []byte(rc.secret))
	mac.Write([]byte(r.Header.Get("X-ForgeCI-Timestamp") + "."))
	mac.Write(body)
	if r.Header.Get("X-ForgeCI-Signature-256") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
		rc.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p notify.Payload
	if err := json.Unmarshal(body, &p); err != nil || p.Event != r.Header.Get("X-ForgeCI-Event") {
		rc.bad++
	}
	rc.got = append(rc.got, p.Event+" "+p.Run.State)
	rc.ids = append(rc.ids, r.Header.Get("X-ForgeCI-Delivery"))
	switch {
	case rc.fail:
		http.Error(w, "down", http.StatusInternalServerError)
	case rc.drop:
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}
}

// set changes how the receiver answers, under its lock.
func (rc *receiver) set(fail, drop bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.fail, rc.drop = fail, drop
}

func (rc *receiver) take() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.got
	rc.got = nil
	return out
}

// TestNotifications: a run's end notifies its project's hook of
// run_ended, and of branch_failed the first time its branch fails and
// branch_recovered when it passes again, signed; a delivery the hook
// refuses is retried and ends FAILED saying why; one whose answer was lost
// is sent again under the same ID; a hook at a private address is refused
// outside the local stack.
func TestNotifications(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	_, secret, err := s.AddHook(ctx, root, p.ID, srv.URL+"/hook", "json", []string{"run_ended", "branch_failed", "branch_recovered"})
	if err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()
	d := &notify.Deliverer{Store: s, AllowPrivate: true, PublicURL: "https://ci.example.com"}
	end := func(state string) {
		t.Helper()
		run, err := s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: "refs/heads/main", Jobs: []store.NewJob{{Name: "a"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `UPDATE runs SET state = $2, finished_at = clock_timestamp() WHERE id = $1`, run.ID, state); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func() notify.Result {
		t.Helper()
		res, err := d.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, step := range []struct {
		state string
		want  string
	}{
		{"FAILED", "run_ended FAILED,branch_failed FAILED"},
		{"FAILED", "run_ended FAILED"},
		{"PASSED", "run_ended PASSED,branch_recovered PASSED"},
		{"PASSED", "run_ended PASSED"},
	} {
		end(step.state)
		deliver()
		got := rc.take()
		if strings.Join(sortedPair(got), ",") != step.want || rc.bad != 0 {
			t.Fatalf("after a %s run: %v (bad %d), want %s", step.state, got, rc.bad, step.want)
		}
	}

	// The hook fails: retried (not at once), then FAILED with its status.
	rc.set(true, false)
	end("FAILED")
	if res := deliver(); res.Failed != 2 {
		t.Fatalf("a refused delivery: %+v", res)
	}
	for range 10 {
		if _, err := s.Pool().Exec(ctx, `UPDATE notifications SET next_attempt_at = now() WHERE state = 'PENDING'`); err != nil {
			t.Fatal(err)
		}
		deliver()
	}
	list, _, err := s.Notifications(ctx, root, "p", store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if n := list[0]; n.State != "FAILED" || n.Attempts != 8 || n.LastStatus == nil || *n.LastStatus != 500 ||
		n.LastError == nil || *n.LastError != "the hook answered 500" || n.HookHost != srv.URL {
		t.Fatalf("a failing delivery: %+v", n)
	}
	rc.set(false, false)
	rc.take()

	// The answer is lost: the delivery is sent again when its lease ends,
	// with the same ID.
	rc.set(false, true)
	end("PASSED")
	deliver()
	rc.set(false, false)
	if _, err := s.Pool().Exec(ctx, `UPDATE notifications SET next_attempt_at = now(), lease_expires_at = NULL WHERE state = 'PENDING'`); err != nil {
		t.Fatal(err)
	}
	deliver()
	rc.mu.Lock()
	ids := rc.ids[len(rc.ids)-4:]
	rc.mu.Unlock()
	if ids[0] != ids[2] && ids[0] != ids[3] {
		t.Fatalf("a resent delivery has a new ID: %v", ids)
	}

	// Outside the local stack a private address is refused.
	strict := &notify.Deliverer{Store: s}
	end("FAILED")
	if res, err := strict.RunOnce(ctx); err != nil || res.Failed == 0 || res.Sent != 0 {
		t.Fatalf("a private hook outside the local stack: %+v %v", res, err)
	}
	list, _, _ = s.Notifications(ctx, root, "p", store.Page{Limit: 1})
	if list[0].LastError == nil || !strings.Contains(*list[0].LastError, "is not a public one") || strings.Contains(*list[0].LastError, "/hook") ||
		strings.Contains(*list[0].LastError, "127.0.0.1") {
		t.Fatalf("the refusal: %+v", list[0])
	}
}

// sortedPair puts run_ended first (the two events of one run end arrive
// in either order).
func sortedPair(got []string) []string {
	if len(got) == 2 && !strings.HasPrefix(got[0], "run_ended") {
		got[0], got[1] = got[1], got[0]
	}
	return got
}
