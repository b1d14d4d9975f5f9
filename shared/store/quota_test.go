package store_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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
		return e.putIn(trusted, bytes.Repeat([]byte{fill}, size))
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

// slowChecks holds each S3 check until n callers are in one at once, or
// 300 ms pass: concurrent registrations overlap as far as they can.
type slowChecks struct {
	store.Objects
	mu      sync.Mutex
	waiting int
	n       int
	all     chan struct{}
}

func (s *slowChecks) Check(ctx context.Context, key, digest string, size int64) error {
	s.mu.Lock()
	s.waiting++
	if s.waiting == s.n {
		close(s.all)
	}
	s.mu.Unlock()
	select {
	case <-s.all:
	case <-time.After(300 * time.Millisecond):
	}
	return s.Objects.Check(ctx, key, digest, size)
}

// TestQuotaCountsOneAtATime: registrations at the same moment are counted
// one after the other, so together they stay within the tier's share;
// uploads handed out and not committed count too, until collected, but an
// upload asked for again is not counted twice.
func TestQuotaCountsOneAtATime(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	e.exec(`UPDATE projects SET storage_quota_bytes = 4000`)
	const n = 6
	e.s.SetObjects(&slowChecks{Objects: e.cas, n: n, all: make(chan struct{})})
	refs := make([]store.BlobRef, n)
	for i := range refs {
		refs[i] = e.putIn(false, bytes.Repeat([]byte{byte('a' + i)}, 1000))
	}
	var wg sync.WaitGroup
	for _, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = e.s.RegisterBlob(ctx, ref, 1000)
		}()
	}
	wg.Wait()
	if used := e.count(`SELECT coalesce(sum(size), 0)::int FROM blobs WHERE NOT trusted`); used != 1000 {
		t.Fatalf("concurrent registrations hold %d untrusted bytes, past the share of 1000", used)
	}

	e.exec(`DELETE FROM blobs`)
	if _, err := e.s.PrepareBlobUpload(ctx, refs[0], 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.PrepareBlobUpload(ctx, refs[0], 1000); err != nil {
		t.Fatalf("the same upload asked for again: %v", err)
	}
	var de *domain.Error
	if _, err := e.s.PrepareBlobUpload(ctx, refs[1], 1); !errors.As(err, &de) || de.Code != domain.ETooLarge {
		t.Fatalf("an upload past the share, counting the one not committed: %v", err)
	}
	// An upload never committed holds its room until it is collected,
	// its object with it, when it ends (store.UploadLife): until then
	// the object may be in S3 whatever its age.
	e.exec(`UPDATE uploads SET created_at = now() - $1::interval`, (store.UploadLife + time.Minute).String())
	if _, err := e.s.PrepareBlobUpload(ctx, refs[1], 1); !errors.As(err, &de) || de.Code != domain.ETooLarge {
		t.Fatalf("an upload past the share, counting one ended but not collected: %v", err)
	}
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if e.present(refs[0].Key()) {
		t.Fatal("the collector left an ended upload's object")
	}
	if _, err := e.s.PrepareBlobUpload(ctx, refs[1], 1000); err != nil {
		t.Fatalf("an upload once an ended one was collected: %v", err)
	}
}
