package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
)

// Blobs belong to a project and a trust tier: a row in blobs says that
// (project, tier) holds the digest and where its bytes are. A job may
// reference only blobs its run's (project, tier) holds, or that it
// uploaded itself into that tier's namespace of the CAS; a digest alone
// grants nothing.
//
// Registering a blob and collecting one (gc.go) take the same lock, a
// transaction-level advisory lock on the object's key, before they touch
// its row: a registration that creates the row checks the object in S3
// under that lock, so it either sees the collector's deletion (and fails:
// upload again) or happens wholly before it (and the row then references
// the object, which the collector will not delete).

// touchBlobSQL marks blob ($1, $2, $3) used, if held, and returns it.
const touchBlobSQL = `
UPDATE blobs SET touched_at = now() WHERE project_id = $1 AND trusted = $2 AND digest = $3
RETURNING size, s3_key`

// lockKeySQL takes the transaction's advisory lock on object key $1 (see
// above); the collector tries for the same lock (lockBlobsSQL,
// lockUploadsSQL) and skips a key it cannot have.
const lockKeySQL = `SELECT pg_advisory_xact_lock(7419, hashtext($1))`

// registerBlobSQL records blob ($1, $2, $3) of $4 bytes at key $5, or
// touches the row held already; it returns the stored size and whether
// the row is new (xmax = 0: no conflicting row was updated).
const registerBlobSQL = `
INSERT INTO blobs (project_id, trusted, digest, size, s3_key) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (project_id, trusted, digest) DO UPDATE SET touched_at = now()
RETURNING size, xmax = 0`

// uploadDoneSQL forgets the upload of key $1: it was committed.
const uploadDoneSQL = `DELETE FROM uploads WHERE s3_key = $1`

// storageUsedSQL is project $1's name, storage quota, and the bytes its
// blobs and its uploads not yet committed (but that of key $2, asked for
// again) hold, in all and in its untrusted tier. An upload counts until it
// is committed or collected (UploadLife): its object may be in S3 all
// that time, whether or not anyone says so.
const storageUsedSQL = `
SELECT p.name, p.storage_quota_bytes,
       coalesce((SELECT sum(size) FROM blobs WHERE project_id = p.id), 0) +
       coalesce((SELECT sum(size) FROM uploads WHERE project_id = p.id AND s3_key <> $2), 0),
       coalesce((SELECT sum(size) FROM blobs WHERE project_id = p.id AND NOT trusted), 0) +
       coalesce((SELECT sum(size) FROM uploads WHERE project_id = p.id AND NOT trusted AND s3_key <> $2), 0)
FROM projects p WHERE p.id = $1`

// UploadLife is how long an upload handed out and not committed is kept,
// and counts against the quota, before the collector deletes it and its
// object: long past its URL's expiry (minutes), longer than a transfer of
// the largest blob should take, short enough that one never used holds
// its room for about two hours, not a day. Handing one out notes the
// collector due within the hour after it ends (noteUpload).
const UploadLife = 2 * time.Hour

// lockQuotaSQL takes the transaction's lock on project $1's storage
// quota: registrations and uploads are counted one at a time, each after
// the last committed, or concurrent ones each saw room for itself alone.
const lockQuotaSQL = `SELECT pg_advisory_xact_lock(7420, hashtext($1))`

// UntrustedShare: a project's untrusted tier (pull requests from forks,
// members without the secrets permission) may hold at most 1/UntrustedShare
// of its storage quota, so that it can never fill the quota and so stop
// trusted runs from being made.
const UntrustedShare = 4

// startUploadSQL records that an upload URL for key $1 of project $2
// (tier $3) and $4 bytes is handed out (again: its age restarts). The
// size only grows: a URL handed out before can still put the bytes it was
// signed for, so asking again for fewer must not free their room (the
// quota, storageUsedSQL, counts the larger, checked when first asked). A
// key is of one tier; a row the collector queued takes the asker's.
const startUploadSQL = `
INSERT INTO uploads (s3_key, project_id, trusted, size) VALUES ($1, $2, $3, $4)
ON CONFLICT (s3_key) DO UPDATE SET created_at = now(), size = greatest(uploads.size, excluded.size), trusted = excluded.trusted`

// Objects is what the store asks of the CAS: whether a key holds a blob,
// and to delete unreferenced ones. *cas.Store is one.
type Objects interface {
	Check(ctx context.Context, key, digest string, size int64) error
	Delete(ctx context.Context, keys []string) error
}

// SetObjects gives the store the CAS. Without one (tests of the lease
// core), registrations trust the caller's check of the bytes.
func (s *Store) SetObjects(o Objects) { s.objects = o }

// BlobRef names a blob: a digest held by one trust tier of one project.
type BlobRef struct {
	ProjectID string
	Trusted   bool
	Digest    string
}

// Key is where new bytes of this blob go in the CAS.
func (b BlobRef) Key() string { return cas.BlobKey(b.ProjectID, b.Trusted, b.Digest) }

// Blob is a held blob.
type Blob struct {
	Digest string
	Size   int64
	Key    string // the object in the CAS
}

// HeldBlob returns the blob if b's (project, tier) holds it, and marks it
// used: the collector leaves it alone for two days, long enough for a job
// told "exists" to commit it.
func (s *Store) HeldBlob(ctx context.Context, b BlobRef) (Blob, bool, error) {
	out := Blob{Digest: b.Digest}
	err := s.pool.QueryRow(ctx, touchBlobSQL, b.ProjectID, b.Trusted, b.Digest).Scan(&out.Size, &out.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, false, nil
	}
	if err != nil {
		return out, false, fmt.Errorf("blob %s: %w", b.Digest, err)
	}
	return out, true, nil
}

// lockKey takes the transaction's advisory lock on an object key.
func lockKey(ctx context.Context, tx pgx.Tx, key string) error {
	if _, err := tx.Exec(ctx, lockKeySQL, key); err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	return nil
}

// registerBlob records that b's tier holds a blob of size bytes at b.Key().
// A blob already held keeps its row (and key). A new row is checked in S3
// under the key's lock (see above), and counts against the project's
// storage quota, under the quota's lock (then the key's: in that order
// everywhere). Whoever holds the quota's lock waits for no job's row: a
// commit has locked its own job's before, a run's creation those it
// cancels (registerSource).
func (s *Store) registerBlob(ctx context.Context, tx pgx.Tx, b BlobRef, size int64) error {
	if err := lockQuota(ctx, tx, b.ProjectID); err != nil {
		return err
	}
	return s.addBlob(ctx, tx, b, size)
}

func (s *Store) addBlob(ctx context.Context, tx pgx.Tx, b BlobRef, size int64) error {
	if err := lockKey(ctx, tx, b.Key()); err != nil {
		return err
	}
	var stored int64
	var inserted bool
	err := tx.QueryRow(ctx, registerBlobSQL, b.ProjectID, b.Trusted, b.Digest, size, b.Key()).Scan(&stored, &inserted)
	if err != nil {
		return fmt.Errorf("register blob: %w", err)
	}
	if stored != size {
		return domain.Errorf(domain.EInvalid, "blob %s is %d bytes, not %d", b.Digest, stored, size)
	}
	if _, err := tx.Exec(ctx, uploadDoneSQL, b.Key()); err != nil {
		return fmt.Errorf("upload done: %w", err)
	}
	if !inserted {
		return nil
	}
	if err := overQuota(ctx, tx, b, 0); err != nil {
		return err
	}
	if s.objects == nil {
		return nil
	}
	err = s.objects.Check(ctx, b.Key(), b.Digest, size)
	switch {
	case errors.Is(err, cas.ErrNotFound):
		return domain.Errorf(domain.EInvalid, "blob %s has not been uploaded into this project's store (ask for an upload URL first)", b.Digest)
	case errors.Is(err, cas.ErrMismatch):
		return domain.Errorf(domain.EInvalid, "uploaded blob does not match its digest and size: %v", err)
	}
	return err
}

// RegisterBlob records a blob outside any lease (operator tools, tests).
func (s *Store) RegisterBlob(ctx context.Context, b BlobRef, size int64) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return s.registerBlob(ctx, tx, b, size) })
}

// lockQuota takes the quota's lock (lockQuotaSQL) for the transaction.
func lockQuota(ctx context.Context, tx pgx.Tx, projectID string) error {
	if _, err := tx.Exec(ctx, lockQuotaSQL, projectID); err != nil {
		return fmt.Errorf("lock the storage quota: %w", err)
	}
	return nil
}

// overQuota refuses more bytes of b past its project's quota or its
// tier's share, counted under the quota's lock (lockQuota, which the
// caller holds).
func overQuota(ctx context.Context, tx pgx.Tx, b BlobRef, more int64) error {
	var used, untrusted, quota int64
	var name string
	if err := tx.QueryRow(ctx, storageUsedSQL, b.ProjectID, b.Key()).Scan(&name, &quota, &used, &untrusted); err != nil {
		return fmt.Errorf("storage quota: %w", err)
	}
	if used+more > quota {
		return domain.Errorf(domain.ETooLarge, "project %s stores %d bytes of sources, artifacts and caches; %d more would pass its storage quota of %d bytes",
			name, used, more, quota)
	}
	if !b.Trusted && untrusted+more > quota/UntrustedShare {
		return domain.Errorf(domain.ETooLarge, "project %s's untrusted work (pull requests from forks, members without the secrets permission) stores %d bytes; %d more would pass its share of the storage quota, %d bytes (a quarter)",
			name, untrusted, more, quota/UntrustedShare)
	}
	return nil
}

// recordUpload checks that size more bytes of b fit, and records the
// upload at that size (or the larger it was asked for before).
func recordUpload(ctx context.Context, tx pgx.Tx, b BlobRef, size int64) error {
	if err := lockQuota(ctx, tx, b.ProjectID); err != nil {
		return err
	}
	if err := overQuota(ctx, tx, b, size); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, startUploadSQL, b.Key(), b.ProjectID, b.Trusted, size); err != nil {
		return fmt.Errorf("record upload: %w", err)
	}
	noteUpload(tx)
	return nil
}

// PrepareBlobUpload is what a writer of the control plane's own (the
// GitHub worker's snapshot of a commit) asks before it puts size bytes of
// blob b: held if b's tier has it already (nothing to put; it is marked
// used), else the bytes must fit the quota and the upload is recorded, so
// that the collector removes the object if no run ever registers it.
func (s *Store) PrepareBlobUpload(ctx context.Context, b BlobRef, size int64) (held bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		held, err = prepareUpload(ctx, tx, b, size)
		return err
	})
	return held, err
}
