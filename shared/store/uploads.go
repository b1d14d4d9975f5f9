package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Handing out an upload URL is recorded in the database (uploads, so the
// collector removes an object never committed; touched_at of a blob held
// already, so the collector leaves it). For a runner that record is a
// side effect like any other: it is made in the transaction that checks
// the lease, so a runner whose lease ended, or that was revoked, meanwhile
// gets no URL and leaves no row. A refused request changes nothing.

// Upload is what an upload request found: the blob its (project, tier)
// holds already (Held: nothing to upload), or an upload recorded for Ref,
// to be presigned.
type Upload struct {
	Ref  BlobRef
	Held bool
	// KeyExists: cache/save only, the key has an entry already (entries
	// are immutable), so nothing was recorded.
	KeyExists bool
}

// PrepareArtifactUpload checks the lease and, in its transaction, the
// upload of an artifact blob of the job's (project, tier).
func (s *Store) PrepareArtifactUpload(ctx context.Context, runnerID, jobID string, l domain.Lease, digest string, size int64) (Upload, error) {
	var up Upload
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		up.Ref = BlobRef{ProjectID: job.ProjectID, Trusted: job.Trusted, Digest: digest}
		var err error
		up.Held, err = prepareUpload(ctx, tx, up.Ref, size)
		return err
	})
	return up, err
}

// PrepareCacheUpload is PrepareArtifactUpload for a cache entry's blob,
// unless the run's scope and tier have an entry for key already.
func (s *Store) PrepareCacheUpload(ctx context.Context, runnerID, jobID string, l domain.Lease, key, digest string, size int64) (Upload, error) {
	var up Upload
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if err := tx.QueryRow(ctx, cacheExistsSQL, job.RunID, key).Scan(&up.KeyExists); err != nil {
			return fmt.Errorf("cache key: %w", err)
		}
		if up.KeyExists {
			up.Held = true
			return nil
		}
		up.Ref = BlobRef{ProjectID: job.ProjectID, Trusted: job.Trusted, Digest: digest}
		var err error
		up.Held, err = prepareUpload(ctx, tx, up.Ref, size)
		return err
	})
	return up, err
}

// PrepareUploadAs is u's upload of a source snapshot into project
// projectID (by ID), checking in its transaction that u may write there;
// the tier is u's (trusted with the secrets permission). The run that
// names the snapshot checks again.
func (s *Store) PrepareUploadAs(ctx context.Context, u User, projectID, digest string, size int64) (Upload, error) {
	var up Upload
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		a, err := authorize(ctx, tx, u, projectID, RankWrite, "project "+projectID)
		if err != nil {
			return err
		}
		up.Ref = BlobRef{ProjectID: projectID, Trusted: a.Secrets, Digest: digest}
		up.Held, err = prepareUpload(ctx, tx, up.Ref, size)
		return err
	})
	return up, err
}

// prepareUpload touches b if its tier holds it (the size must be the
// one asked), else checks that size more bytes fit the project's quota
// and records the upload.
func prepareUpload(ctx context.Context, tx pgx.Tx, b BlobRef, size int64) (held bool, err error) {
	var heldSize int64
	var key string
	err = tx.QueryRow(ctx, touchBlobSQL, b.ProjectID, b.Trusted, b.Digest).Scan(&heldSize, &key)
	switch {
	case err == nil && heldSize != size:
		return false, domain.Errorf(domain.EInvalid, "blob %s is %d bytes, not %d", b.Digest, heldSize, size)
	case err == nil:
		return true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("blob %s: %w", b.Digest, err)
	}
	return false, recordUpload(ctx, tx, b, size)
}
