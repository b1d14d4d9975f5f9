package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRejectedRunsReleaseTheirSnapshot: a run rejected before it ran (by
// a member, by a newer commit of its pull request, or for want of a
// decision) lets go of its snapshot, which the collector then takes, so a
// stranger's pushes do not hold the project's storage for its retention;
// retrying it says why it cannot.
func TestRejectedRunsReleaseTheirSnapshot(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	root := pgtest.Admin(t, e.s, "root")
	data := []byte("a stranger's snapshot")
	ref := e.putIn(false, data)
	run, err := e.s.CreateRun(ctx, store.NewRun{Project: "p", Untrusted: true, Actor: "github:1", Trigger: "fork",
		Source: domain.Source{BlobDigest: ref.Digest, ManifestDigest: ref.Digest, Size: int64(len(data))},
		Jobs:   []store.NewJob{{Name: "a"}}})
	if err != nil || run.Approval != store.ApprovalPending {
		t.Fatalf("the fork's run: %+v %v", run, err)
	}
	if _, err := e.s.Reject(ctx, root, run.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := e.s.GetRun(ctx, run.ID); err != nil || got.SourceDigest != "" || got.State != domain.RunCanceled {
		t.Fatalf("the rejected run: %+v %v", got, err)
	}
	e.exec(`UPDATE blobs SET touched_at = now() - interval '3 days'`)
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if e.count(`SELECT count(*) FROM blobs WHERE digest = $1`, ref.Digest) != 0 || e.present(ref.Key()) {
		t.Fatal("the rejected run's snapshot is still kept")
	}
	if _, err := e.s.Retry(ctx, root, run.ID, ""); domain.ErrorCode(err) != domain.EConflict ||
		!strings.Contains(err.Error(), "rejected before it ran") {
		t.Fatalf("retry of the rejected run: %v", err)
	}
}
