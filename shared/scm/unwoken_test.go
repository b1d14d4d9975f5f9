package scm_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// TestUnwokenDeliveryIsRefused: a webhook delivery whose note for the
// GitHub worker (S3) and kick (Lambda) both fail is recorded, but
// answered 503 so that GitHub shows it failed (nothing would look at it
// before the next event); its redelivery, once S3 takes writes, notes
// the worker and is answered 202 (kicked only while its note fails: a
// replayed body must not buy an invoke each time). The note or the kick
// alone is enough.
func TestUnwokenDeliveryIsRefused(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	b := wake.New(e.cas, time.Hour)
	e.store.SetBoard(b)
	var kicks atomic.Int64
	var kickFails atomic.Bool
	e.api.OnDelivery = func(context.Context) error {
		kicks.Add(1)
		if kickFails.Load() {
			return errors.New("lambda: 429 TooManyRequestsException")
		}
		return nil
	}
	bodies := map[string][]byte{}
	for i, guid := range []string{"g1", "g2", "g3"} {
		dir, sha := gitRepo(t, pipelineYAML+strings.Repeat("\n", i))
		e.gh.AddGitCommit(t, repoName, dir, sha)
		bodies[guid] = pushPayload(sha)
	}
	deliver := func(guid string, want int, wantKicks int64) {
		t.Helper()
		body := bodies[guid]
		if code, out := e.deliver("push", guid, body, sign(repoSecret, body)); code != want {
			t.Fatalf("delivery %s: %d %v, want %d", guid, code, out, want)
		}
		if kicks.Load() != wantKicks {
			t.Fatalf("delivery %s: %d kicks in all, want %d", guid, kicks.Load(), wantKicks)
		}
	}
	noted := func() int {
		t.Helper()
		notes, err := b.Notes(ctx, wake.SCM)
		if err != nil {
			t.Fatal(err)
		}
		return len(notes)
	}

	b.Drop = func(string) bool { return true }
	kickFails.Store(true)
	deliver("g1", http.StatusServiceUnavailable, 1)
	deliver("g1", http.StatusServiceUnavailable, 2) // redelivered while both fail
	if n := e.count(`SELECT count(*) FROM scm_deliveries WHERE state = 'PENDING'`); n != 1 || noted() != 0 {
		t.Fatalf("%d deliveries pending, %d notes; want the one recorded, no note", n, noted())
	}
	b.Drop = nil
	deliver("g1", http.StatusAccepted, 2) // redelivered once S3 takes writes: noted, not kicked
	if noted() != 1 {
		t.Fatal("the redelivery did not note the GitHub worker")
	}

	// Either alone is enough; a delivery done is not woken for again.
	e.runOnce()
	if n := e.count(`SELECT count(*) FROM scm_deliveries WHERE state = 'DONE'`); n != 1 {
		t.Fatalf("%d deliveries done, want 1", n)
	}
	deliver("g1", http.StatusAccepted, 2)
	b.Drop = func(string) bool { return true }
	kickFails.Store(false)
	deliver("g2", http.StatusAccepted, 3) // the kick alone
	b.Drop = nil
	kickFails.Store(true)
	deliver("g3", http.StatusAccepted, 4) // the note alone
	if n := e.count(`SELECT count(*) FROM scm_deliveries WHERE state = 'PENDING'`); n != 2 {
		t.Fatalf("%d deliveries pending, want 2", n)
	}
}

// TestDispatchNotedBeforeItCommits: a user's run request for a GitHub
// project is a delivery noted for the GitHub worker before it commits, as
// every user's write: while S3 refuses the note, it is refused (503) and
// nothing is recorded, so the user's retry makes one run, not two.
func TestDispatchNotedBeforeItCommits(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	b := wake.New(e.cas, time.Hour)
	e.store.SetBoard(b)
	e.store.SetSCM(true)
	req := store.DispatchRequest{Ref: "refs/heads/main", UserID: e.admin.ID, UserName: e.admin.Name, Trusted: true}
	b.Drop = func(string) bool { return true }
	if _, err := e.store.RecordDispatch(ctx, repoID, req); domain.ErrorCode(err) != domain.EUnavailable {
		t.Fatalf("a run request while S3 refuses notes: %v, want unavailable", err)
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries`); n != 0 {
		t.Fatalf("%d deliveries recorded by a refused request", n)
	}
	b.Drop = nil
	if _, err := e.store.RecordDispatch(ctx, repoID, req); err != nil {
		t.Fatal(err)
	}
	if notes, err := b.Notes(ctx, wake.SCM); err != nil || len(notes) != 1 || e.count(`SELECT count(*) FROM scm_deliveries`) != 1 {
		t.Fatalf("after the retry: notes %v (%v), %d deliveries", notes, err, e.count(`SELECT count(*) FROM scm_deliveries`))
	}
}
