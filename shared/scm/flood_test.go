package scm_test

import (
	"strings"
	"testing"
)

// TestChecksAreNotHeldBehindDeliveries: a pass pushes check runs between
// the deliveries it takes, so a flood of deliveries (a fork's pushes)
// does not hold back every commit's checks until it is drained: the first
// commit's check run is created before the last commit is downloaded.
func TestChecksAreNotHeldBehindDeliveries(t *testing.T) {
	e := setup(t)
	for i := range 3 {
		dir, sha := gitRepo(t, pipelineYAML+"# commit "+string(rune('a'+i))+"\n")
		e.gh.AddGitCommit(t, repoName, dir, sha)
		body := pushPayload(sha)
		e.deliver("push", "g-flood-"+string(rune('a'+i)), body, sign(repoSecret, body))
	}
	if res := e.runOnce(); res.Runs != 3 {
		t.Fatalf("pass: %+v", res)
	}
	firstCheck, lastDownload := -1, -1
	for i, c := range e.gh.Calls() {
		if c.Method == "POST" && strings.HasSuffix(c.Path, "/check-runs") && firstCheck < 0 {
			firstCheck = i
		}
		if c.Method == "GET" && strings.Contains(c.Path, "/tarball/") {
			lastDownload = i
		}
	}
	if firstCheck < 0 || lastDownload < 0 || firstCheck > lastDownload {
		t.Fatalf("the first check run was created at call %d, the last commit downloaded at call %d", firstCheck, lastDownload)
	}
}
