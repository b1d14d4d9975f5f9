package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestUntrustedShareOfTheQuota: untrusted work may hold at most a quarter
// of the project's storage quota, so a fork's pushes cannot fill it and
// stop trusted runs from being made; trusted work has the rest, and the
// whole quota still binds both. PrepareBlobUpload (the GitHub worker's,
// before it puts a commit's snapshot) checks the same and records the
// upload, and says held for a blob the tier has.
func TestUntrustedShareOfTheQuota(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	e.exec(`UPDATE projects SET storage_quota_bytes = 4000`)
	put := func(trusted bool, size int, fill byte) store.BlobRef {
		t.Helper()
		data := bytes.Repeat([]byte{fill}, size)
		sum := sha256.Sum256(data)
		ref := store.BlobRef{ProjectID: e.project.ID, Trusted: trusted, Digest: "sha256:" + hex.EncodeToString(sum[:])}
		if err := e.cas.Put(ctx, ref.Key(), ref.Digest, bytes.NewReader(data), int64(size)); err != nil {
			t.Fatal(err)
		}
		return ref
	}
	tooLarge := func(err error, says string) bool {
		var de *domain.Error
		return errors.As(err, &de) && de.Code == domain.ETooLarge && strings.Contains(de.Message, says)
	}
	for i, size := range []int{600, 400} {
		if err := e.s.RegisterBlob(ctx, put(false, size, byte('a'+i)), int64(size)); err != nil {
			t.Fatalf("untrusted blob of %d within its share: %v", size, err)
		}
	}
	one := put(false, 1, 'z')
	if err := e.s.RegisterBlob(ctx, one, 1); !tooLarge(err, "share of the storage quota, 1000 bytes") {
		t.Fatalf("an untrusted blob past its share: %v", err)
	}
	if _, err := e.s.PrepareBlobUpload(ctx, one, 1); !tooLarge(err, "share of the storage quota") {
		t.Fatalf("an untrusted upload past its share: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM blobs WHERE NOT trusted`); n != 2 {
		t.Fatalf("%d untrusted blobs, want the two within the share", n)
	}
	big := put(true, 3000, 't')
	if held, err := e.s.PrepareBlobUpload(ctx, big, 3000); err != nil || held {
		t.Fatalf("a trusted upload within the rest: %v %v", held, err)
	}
	if n := e.count(`SELECT count(*) FROM uploads WHERE s3_key = $1`, big.Key()); n != 1 {
		t.Fatal("the upload was not recorded for the collector")
	}
	if err := e.s.RegisterBlob(ctx, big, 3000); err != nil {
		t.Fatalf("trusted work has the rest of the quota: %v", err)
	}
	if held, err := e.s.PrepareBlobUpload(ctx, big, 3000); err != nil || !held {
		t.Fatalf("a held blob: %v %v", held, err)
	}
	if err := e.s.RegisterBlob(ctx, put(true, 1, 'u'), 1); !tooLarge(err, "quota of 4000 bytes") {
		t.Fatalf("a trusted blob past the whole quota: %v", err)
	}
}
