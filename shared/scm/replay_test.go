package scm_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// TestOldPushIsNotRebuilt: a signed push body sent again long after GitHub
// took the push (a replay from a delivery log, past the deduplication of
// its ID and body) makes no run of a commit its ref has left behind; an
// old push whose ref still names its commit (a tag made through the API
// may not move pushed_at), and a push GitHub took an hour ago, do.
func TestOldPushIsNotRebuilt(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	n := 0
	push := func(ago time.Duration) (runs int, note string) {
		t.Helper()
		var m map[string]any
		_ = json.Unmarshal(pushPayload(sha), &m)
		m["repository"].(map[string]any)["pushed_at"] = time.Now().Add(-ago).Unix()
		b, _ := json.Marshal(m)
		n++
		guid := "g-push-" + strconv.Itoa(n)
		e.deliver("push", guid, b, sign(repoSecret, b))
		res := e.runOnce()
		_ = e.pool.QueryRow(t.Context(), `SELECT coalesce(note, '') FROM scm_deliveries WHERE guid = $1`, guid).Scan(&note)
		return res.Runs, note
	}
	e.gh.AddRef(repoName, "refs/heads/main", strings.Repeat("e", 40)) // main moved on
	if runs, note := push(8 * 24 * time.Hour); runs != 0 || !strings.Contains(note, "a replay") {
		t.Fatalf("a push made 8 days ago, its branch moved on: %d runs, note %q", runs, note)
	}
	e.gh.AddRef(repoName, "refs/heads/main", sha)
	if runs, _ := push(9 * 24 * time.Hour); runs != 1 {
		t.Fatalf("a push made 9 days ago whose ref still names it: %d runs", runs)
	}
	e.gh.AddRef(repoName, "refs/heads/main", strings.Repeat("e", 40))
	if runs, _ := push(time.Hour); runs != 1 {
		t.Fatalf("a push made an hour ago: %d runs", runs)
	}
	// An old annotated tag's push: after is the tag object, head_commit
	// the commit the tag (still) names. Not a replay.
	var m map[string]any
	_ = json.Unmarshal(pushPayload(strings.Repeat("f", 40)), &m)
	m["ref"] = "refs/tags/v1"
	m["head_commit"] = map[string]any{"id": sha}
	m["repository"].(map[string]any)["pushed_at"] = time.Now().Add(-10 * 24 * time.Hour).Unix()
	tag, _ := json.Marshal(m)
	e.gh.AddRef(repoName, "refs/tags/v1", sha)
	e.deliver("push", "g-tag", tag, sign(repoSecret, tag))
	e.runOnce()
	var note string
	_ = e.pool.QueryRow(t.Context(), `SELECT coalesce(note, '') || coalesce(last_error, '') FROM scm_deliveries WHERE guid = 'g-tag'`).Scan(&note)
	if strings.Contains(note, "a replay") {
		t.Fatalf("an old annotated tag still naming its commit was taken for a replay: %q", note)
	}
}

// TestReplayAfterCollection: a push body is remembered after its delivery
// is collected (30 days), so a replay under a new ID, its ref unmoved (a
// release tag), makes no run; a push GitHub took more than
// store.PushHorizon before, whose body may be forgotten, is refused by its
// age, saying so.
func TestReplayAfterCollection(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.gh.AddRef(repoName, "refs/heads/main", sha)
	body := func(ago time.Duration) []byte {
		var m map[string]any
		_ = json.Unmarshal(pushPayload(sha), &m)
		m["repository"].(map[string]any)["pushed_at"] = time.Now().Add(-ago).Unix()
		b, _ := json.Marshal(m)
		return b
	}
	b := body(time.Hour)
	e.deliver("push", "g-first", b, sign(repoSecret, b))
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("the push: %d runs", res.Runs)
	}
	// The collector deletes finished deliveries after 30 days.
	if _, err := e.pool.Exec(t.Context(), `DELETE FROM scm_deliveries`); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.deliver("push", "g-replayed", b, sign(repoSecret, b)); code >= 300 {
		t.Fatalf("the replay is answered %d (GitHub would retry it)", code)
	}
	if res := e.runOnce(); res.Runs != 0 {
		t.Fatalf("the replay after its delivery was collected: %d runs", res.Runs)
	}
	var recorded int
	_ = e.pool.QueryRow(t.Context(), `SELECT count(*) FROM scm_deliveries`).Scan(&recorded)
	if recorded != 0 {
		t.Fatalf("the replay was recorded (%d deliveries)", recorded)
	}
	old := body(store.PushHorizon + 24*time.Hour)
	e.deliver("push", "g-old", old, sign(repoSecret, old))
	if res := e.runOnce(); res.Runs != 0 {
		t.Fatalf("a push made %v ago: %d runs", store.PushHorizon+24*time.Hour, res.Runs)
	}
	var note string
	_ = e.pool.QueryRow(t.Context(), `SELECT coalesce(note, '') FROM scm_deliveries WHERE guid = 'g-old'`).Scan(&note)
	if !strings.Contains(note, "older than the pushes ForgeCI remembers") {
		t.Fatalf("the old push's delivery says %q", note)
	}
	// Just upgraded: push bodies remembered since now. A push made ten
	// days ago may have been delivered, and its delivery collected,
	// before: refused, though its ref still names it; one made before
	// the memory began is the same once it did.
	if _, err := e.pool.Exec(t.Context(), `UPDATE scm_push_memory SET started_at = now() - interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	tenDays := body(10 * 24 * time.Hour)
	e.deliver("push", "g-ten", tenDays, sign(repoSecret, tenDays))
	if res := e.runOnce(); res.Runs != 0 {
		t.Fatalf("a push made before push bodies were remembered: %d runs", res.Runs)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE scm_push_memory SET started_at = now() - interval '30 days'`); err != nil {
		t.Fatal(err)
	}
	tenDays = body(10*24*time.Hour + time.Minute)
	e.deliver("push", "g-ten-later", tenDays, sign(repoSecret, tenDays))
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("a push made ten days ago, since push bodies were remembered, its ref unmoved: %d runs", res.Runs)
	}
}
