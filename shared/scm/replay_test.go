package scm_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestOldPushIsNotRebuilt: a signed push body sent again long after GitHub
// took the push (a replay from a delivery log, past the deduplication of
// its ID and body) makes no run of the commit the branch has left behind;
// a push GitHub took an hour ago still does.
func TestOldPushIsNotRebuilt(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	pushedAt := func(ago time.Duration) []byte {
		var m map[string]any
		_ = json.Unmarshal(pushPayload(sha), &m)
		m["repository"].(map[string]any)["pushed_at"] = time.Now().Add(-ago).Unix()
		b, _ := json.Marshal(m)
		return b
	}
	old := pushedAt(8 * 24 * time.Hour)
	e.deliver("push", "g-replayed", old, sign(repoSecret, old))
	if res := e.runOnce(); res.Runs != 0 || res.Ignored != 1 {
		t.Fatalf("a push made 8 days ago: %+v", res)
	}
	var note string
	if err := e.pool.QueryRow(t.Context(), `SELECT note FROM scm_deliveries WHERE guid = 'g-replayed'`).Scan(&note); err != nil ||
		!strings.Contains(note, "a replay") {
		t.Fatalf("the replay's note: %q %v", note, err)
	}
	recent := pushedAt(time.Hour)
	e.deliver("push", "g-recent", recent, sign(repoSecret, recent))
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("a push made an hour ago: %+v", res)
	}
}
