package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestUploadAskedAgainKeepsItsRoom: an upload asked for again with fewer
// bytes still counts its first size against the quota (the first URL can
// still put them: asked again with 0 bytes, every blob's room was freed
// and S3 could hold past the quota), and a row the collector queued takes
// the tier of the upload that asks for its key.
func TestUploadAskedAgainKeepsItsRoom(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	s.SetObjects(castest.New(t))
	p := pgtest.Project(t, s, "p")
	if _, err := s.Pool().Exec(ctx, `UPDATE projects SET storage_quota_bytes = 4000`); err != nil {
		t.Fatal(err)
	}
	ref := func(i int, trusted bool) store.BlobRef {
		sum := sha256.Sum256([]byte(fmt.Sprint(i)))
		return store.BlobRef{ProjectID: p.ID, Trusted: trusted, Digest: "sha256:" + hex.EncodeToString(sum[:])}
	}
	for i := range 4 {
		if _, err := s.PrepareBlobUpload(ctx, ref(i, true), 900); err != nil {
			t.Fatalf("blob %d: %v", i, err)
		}
		if _, err := s.PrepareBlobUpload(ctx, ref(i, true), 0); err != nil {
			t.Fatalf("blob %d asked again: %v", i, err)
		}
	}
	if _, err := s.PrepareBlobUpload(ctx, ref(4, true), 900); domain.ErrorCode(err) != domain.ETooLarge {
		t.Fatalf("a fifth 900 bytes in a quota of 4000: %v, want too large", err)
	}

	u := ref(5, false)
	if _, err := s.Pool().Exec(ctx, `INSERT INTO uploads (s3_key, project_id, created_at) VALUES ($1, $2, 'epoch')`, u.Key(), p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrepareBlobUpload(ctx, u, 100); err != nil {
		t.Fatal(err)
	}
	var trusted bool
	if err := s.Pool().QueryRow(ctx, `SELECT trusted FROM uploads WHERE s3_key = $1`, u.Key()).Scan(&trusted); err != nil || trusted {
		t.Fatalf("an untrusted upload of a queued key counts as trusted %v (%v)", trusted, err)
	}
}
