package notify_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/notify"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// attemptsFixture is a project with hooks run_ended hooks (one when 0)
// served by h.
func attemptsFixture(t *testing.T, h http.Handler, hooks ...int) (*store.Store, func(n int), func() []store.NotificationInfo) {
	t.Helper()
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	n := 1
	if len(hooks) > 0 {
		n = hooks[0]
	}
	for i := range n {
		if _, _, err := s.AddHook(ctx, root, p.ID, fmt.Sprintf("%s/hook%d", srv.URL, i), "json", []string{"run_ended"}); err != nil {
			t.Fatal(err)
		}
	}
	end := func(n int) {
		t.Helper()
		for range n {
			run, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "a"}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Pool().Exec(ctx, `UPDATE runs SET state = 'PASSED', finished_at = clock_timestamp() WHERE id = $1`, run.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	list := func() []store.NotificationInfo {
		t.Helper()
		l, _, err := s.Notifications(ctx, root, "p", store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	return s, end, list
}

// TestAttemptsCountWhenTheSenderStops: an attempt cut short by the end of
// the sweeper's context is still recorded, and one never recorded (the
// process died) still counts, so a delivery is tried at most 8 times
// before it ends FAILED; before, such attempts were not counted and the
// delivery was retried for ever.
func TestAttemptsCountWhenTheSenderStops(t *testing.T) {
	got := make(chan struct{}, 10)
	s, end, list := attemptsFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // then the server sees the client go
		got <- struct{}{}
		<-r.Context().Done() // never answers
	}))
	end(1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-got; cancel() }()
	d := &notify.Deliverer{Store: s, AllowPrivate: true}
	if _, err := d.RunOnce(ctx); err != nil {
		t.Fatalf("a pass whose context ends mid-send: %v", err)
	}
	if n := list()[0]; n.State != "PENDING" || n.Attempts != 1 || n.LastError == nil {
		t.Fatalf("the cut attempt was not recorded: %+v", n)
	}
	// Claimed and never recorded, again and again: the claims count.
	for i := range 10 {
		if _, err := s.Pool().Exec(context.Background(), `UPDATE notifications SET next_attempt_at = now(), lease_expires_at = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
		work, err := s.ClaimNotifications(context.Background(), 5, time.Millisecond, 8)
		if err != nil {
			t.Fatal(err)
		}
		if i < 7 && len(work) != 1 || i >= 7 && len(work) != 0 {
			t.Fatalf("claim %d: %d deliveries", i+2, len(work))
		}
	}
	if n := list()[0]; n.State != "FAILED" || n.Attempts != 8 || n.LastError == nil || !strings.Contains(*n.LastError, "without an outcome") {
		t.Fatalf("a delivery whose attempts were never recorded: %+v", n)
	}
}

// TestPassFitsItsDeadline: a pass claims nothing it has no time to send
// before its caller's deadline, and sends a batch at once, so one slow
// hook does not hold up the others; a batch has one delivery per hook, so
// a hook hears of runs in turn and is sent no burst.
func TestPassFitsItsDeadline(t *testing.T) {
	var mu sync.Mutex
	inFlight, most := map[string]int{}, 0
	var order []string
	s, end, list := attemptsFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		mu.Lock()
		inFlight[r.URL.Path]++
		most = max(most, inFlight[r.URL.Path])
		order = append(order, r.URL.Path+" "+r.Header.Get("X-ForgeCI-Delivery"))
		mu.Unlock()
		time.Sleep(time.Second) // a slow hook
		mu.Lock()
		inFlight[r.URL.Path]--
		mu.Unlock()
	}), 2)
	end(3) // three run ends: six deliveries, three for each hook
	d := &notify.Deliverer{Store: s, AllowPrivate: true}
	short, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	if res, err := d.RunOnce(short); err != nil || res.Sent+res.Failed != 0 {
		t.Fatalf("a pass 12 s from its deadline: %+v %v", res, err)
	}
	for _, n := range list() {
		if n.Attempts != 0 {
			t.Fatalf("claimed without time to send: %+v", n)
		}
	}
	start := time.Now()
	res, err := d.RunOnce(context.Background())
	if err != nil || res.Sent != 6 {
		t.Fatalf("a pass: %+v %v", res, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("six deliveries to two hooks answering in 1 s took %v: one after another", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("a hook was sent %d deliveries at once", most)
	}
	last := map[string]int{}
	for _, o := range order {
		path, id, _ := strings.Cut(o, " ")
		n, _ := strconv.Atoi(id)
		if n < last[path] {
			t.Errorf("hook %s heard of delivery %d after %d", path, n, last[path])
		}
		last[path] = n
	}
}

// TestEveryOutcomeIsRecorded: when recording one delivery's outcome fails,
// the others of its batch are still recorded, not left under their lease
// to be sent again.
func TestEveryOutcomeIsRecorded(t *testing.T) {
	s, end, list := attemptsFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
	}), 3)
	end(1)
	ctx := context.Background()
	// Recording the first delivery's outcome fails.
	if _, err := s.Pool().Exec(ctx, `
CREATE FUNCTION refuse_first() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.lease_id IS NOT NULL AND NEW.lease_id IS NULL AND OLD.id = (SELECT min(id) FROM notifications) THEN
        RAISE EXCEPTION 'refused';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_first BEFORE UPDATE ON notifications FOR EACH ROW EXECUTE FUNCTION refuse_first();`); err != nil {
		t.Fatal(err)
	}
	d := &notify.Deliverer{Store: s, AllowPrivate: true}
	if _, err := d.RunOnce(ctx); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a pass whose record failed: %v", err)
	}
	delivered := 0
	for _, n := range list() {
		if n.State == "DELIVERED" {
			delivered++
		}
	}
	if delivered != 2 {
		t.Fatalf("%d of the batch's other 2 deliveries recorded: %+v", delivered, list())
	}
}
