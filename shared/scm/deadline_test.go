package scm_test

import (
	"context"
	"testing"
	"time"
)

// TestDeliveryCutOffIsRecorded: a delivery whose work runs into the end
// of the worker's invocation (a tarball download that never ends) is cut
// off a margin before it, and its failure recorded: an attempt with its
// error, the lease let go, due again after a backoff. Before, the work
// ran to the invocation's end, where Lambda kills it, and nothing was
// recorded until the lease ran out.
func TestDeliveryCutOffIsRecorded(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	release := make(chan struct{})
	defer close(release)
	e.gh.BeforeTarball = func() { <-release }
	body := pushPayload(sha)
	e.deliver("push", "guid-cutoff", body, sign(repoSecret, body))
	e.worker.Margin = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if _, err := e.worker.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the pass ran to its invocation's end")
	}
	var state, lastError string
	var leased bool
	if err := e.pool.QueryRow(context.Background(), `SELECT state, coalesce(last_error, ''), lease_id IS NOT NULL
		FROM scm_deliveries WHERE guid = 'guid-cutoff'`).Scan(&state, &lastError, &leased); err != nil {
		t.Fatal(err)
	}
	if state != "PENDING" || lastError == "" || leased {
		t.Fatalf("the cut-off delivery: %s, leased %v, error %q", state, leased, lastError)
	}
}
