package store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/store"
)

// failingDeletes is a CAS whose deletes fail while fail is set (S3 down,
// or the collector's time running out in between).
type failingDeletes struct {
	store.Objects
	fail bool
	// kill, once the objects are deleted, ends the database sessions
	// idle in a transaction: the collector's, which then cannot commit.
	kill string
}

func (f *failingDeletes) Delete(ctx context.Context, keys []string) error {
	if f.fail {
		return errors.New("s3 unreachable")
	}
	if err := f.Objects.Delete(ctx, keys); err != nil || f.kill == "" {
		return err
	}
	c, err := pgx.Connect(ctx, f.kill)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle in transaction'`)
	return err
}

// TestDroppedBlobsNeverDangle: the collector deletes a blob's row before
// its object, never the other way round, so no row ever names an object
// that is gone. With the deletes failing, the rows go, the objects stay,
// queued; a registration of the same bytes meanwhile keeps its object;
// the next collection deletes the others.
func TestDroppedBlobsNeverDangle(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	objects := &failingDeletes{Objects: e.cas, fail: true}
	e.s.SetObjects(objects)
	kept, dropped := e.put(bytes.Repeat([]byte("k"), 10)), e.put(bytes.Repeat([]byte("d"), 10))
	for _, ref := range []store.BlobRef{kept, dropped} {
		if err := e.s.RegisterBlob(ctx, ref, 10); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(`UPDATE blobs SET touched_at = now() - interval '30 days'`)
	dangling := func() int {
		n := 0
		for _, ref := range []store.BlobRef{kept, dropped} {
			if e.count(`SELECT count(*) FROM blobs WHERE s3_key = $1`, ref.Key()) > 0 && !e.present(ref.Key()) {
				n++
			}
		}
		return n
	}
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err == nil {
		t.Fatal("the deletes failed, and the collection said nothing")
	}
	if n := e.count(`SELECT count(*) FROM blobs`); n != 0 || !e.present(kept.Key()) || !e.present(dropped.Key()) || dangling() != 0 {
		t.Fatalf("after failed deletes: %d rows, objects %v %v", n, e.present(kept.Key()), e.present(dropped.Key()))
	}
	if n := e.count(`SELECT count(*) FROM uploads`); n != 2 {
		t.Fatalf("%d objects queued, want 2", n)
	}
	if err := e.s.RegisterBlob(ctx, kept, 10); err != nil {
		t.Fatalf("the same bytes registered again: %v", err)
	}
	objects.fail = false
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if !e.present(kept.Key()) || e.present(dropped.Key()) || dangling() != 0 || e.count(`SELECT count(*) FROM uploads`) != 0 {
		t.Fatalf("after the next collection: kept %v, dropped %v, dangling %d", e.present(kept.Key()), e.present(dropped.Key()), dangling())
	}
}

// TestCollectorDiesAfterDeleting: the collector's transaction ends (its
// connection killed) just after the objects are deleted: no row is left
// naming them, and the next collection finishes the queue.
func TestCollectorDiesAfterDeleting(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	objects := &failingDeletes{Objects: e.cas, kill: e.s.Pool().Config().ConnString()}
	e.s.SetObjects(objects)
	refs := []store.BlobRef{e.put(bytes.Repeat([]byte("a"), 10)), e.put(bytes.Repeat([]byte("b"), 10))}
	for _, ref := range refs {
		if err := e.s.RegisterBlob(ctx, ref, 10); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(`UPDATE blobs SET touched_at = now() - interval '30 days'`)
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err == nil {
		t.Fatal("the collector's transaction was killed, and the collection said nothing")
	}
	for _, ref := range refs {
		if e.count(`SELECT count(*) FROM blobs WHERE s3_key = $1`, ref.Key()) > 0 && !e.present(ref.Key()) {
			t.Fatalf("a row names the deleted object %s", ref.Key())
		}
	}
	objects.kill = ""
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM blobs`) + e.count(`SELECT count(*) FROM uploads`); n != 0 || e.present(refs[0].Key()) {
		t.Fatalf("after the next collection: %d rows, object %v", n, e.present(refs[0].Key()))
	}
}

// TestOldSharedKeysAreCollected: a key from before keys were namespaced
// (sha256/<hex>) that several (project, tier) rows share loses its object
// when the last row goes, even when every row goes in one batch, and
// keeps it while one row stays.
func TestOldSharedKeysAreCollected(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	legacy := func(data []byte) (key, digest string) {
		ref := e.putIn(true, data)
		key = "sha256/" + ref.Digest[len("sha256:"):]
		if err := e.cas.Put(ctx, key, ref.Digest, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		for _, trusted := range []bool{true, false} {
			e.exec(`INSERT INTO blobs (project_id, trusted, digest, size, s3_key, touched_at)
				VALUES ($1, $2, $3, $4, $5, now() - interval '30 days')`, e.project.ID, trusted, ref.Digest, len(data), key)
		}
		return key, ref.Digest
	}
	gone, _ := legacy([]byte("both rows unreferenced"))
	kept, keptDigest := legacy([]byte("one row touched yesterday"))
	e.exec(`UPDATE blobs SET touched_at = now() - interval '1 day' WHERE digest = $1 AND trusted`, keptDigest)
	for range 2 {
		if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.count(`SELECT count(*) FROM blobs WHERE s3_key = $1`, gone); n != 0 || e.present(gone) {
		t.Errorf("both rows unreferenced: %d rows left, object present %v; want none and gone", n, e.present(gone))
	}
	if n := e.count(`SELECT count(*) FROM blobs WHERE s3_key = $1`, kept); n != 1 || !e.present(kept) {
		t.Errorf("one row held: %d rows left, object present %v; want 1 and present", n, e.present(kept))
	}
	if n := e.count(`SELECT count(*) FROM uploads`); n != 0 {
		t.Errorf("%d objects still queued, want none", n)
	}
}

// TestCollectorSkipsAKeyInUse: an upload whose key a registration holds
// (its advisory lock taken, the commit not yet made) is left, object and
// row, while another stale upload in the same batch goes; once the
// registration's transaction ends, the next collection takes it.
func TestCollectorSkipsAKeyInUse(t *testing.T) {
	ctx := context.Background()
	e := newGCEnv(t)
	busy, idle := e.put([]byte("a key a registration holds")), e.put([]byte("a key nobody holds"))
	for _, ref := range []store.BlobRef{busy, idle} {
		if _, err := e.s.PrepareBlobUpload(ctx, ref, 32); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(`UPDATE uploads SET created_at = now() - interval '2 days'`)
	tx, err := e.s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7419, hashtext($1))`, busy.Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if !e.present(busy.Key()) || e.count(`SELECT count(*) FROM uploads WHERE s3_key = $1`, busy.Key()) != 1 {
		t.Fatalf("the held key's upload: object present %v, rows %d; want both kept", e.present(busy.Key()),
			e.count(`SELECT count(*) FROM uploads WHERE s3_key = $1`, busy.Key()))
	}
	if e.present(idle.Key()) || e.count(`SELECT count(*) FROM uploads WHERE s3_key = $1`, idle.Key()) != 0 {
		t.Fatalf("the free key's upload: object present %v; want it and its row gone", e.present(idle.Key()))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if e.present(busy.Key()) || e.count(`SELECT count(*) FROM uploads`) != 0 {
		t.Fatalf("after the registration ended: object present %v, %d uploads left", e.present(busy.Key()), e.count(`SELECT count(*) FROM uploads`))
	}
}
