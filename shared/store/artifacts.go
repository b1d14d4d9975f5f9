package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// BlobKnown reports whether a verified blob with this digest is registered,
// and its size.
func (s *Store) BlobKnown(ctx context.Context, digest string) (int64, bool, error) {
	var size int64
	err := s.pool.QueryRow(ctx, `SELECT size FROM blobs WHERE digest = $1`, digest).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("blob %s: %w", digest, err)
	}
	return size, true, nil
}

// registerBlob records a blob the caller has verified in S3.
func registerBlob(ctx context.Context, tx pgx.Tx, digest string, size int64) error {
	var stored int64
	err := tx.QueryRow(ctx, `
		INSERT INTO blobs (digest, size) VALUES ($1, $2)
		ON CONFLICT (digest) DO UPDATE SET digest = EXCLUDED.digest
		RETURNING size`, digest, size).Scan(&stored)
	if err != nil {
		return fmt.Errorf("register blob: %w", err)
	}
	if stored != size {
		return domain.Errorf(domain.EInvalid, "blob %s is %d bytes, not %d", digest, stored, size)
	}
	return nil
}

// RegisterBlob records a verified blob outside any lease (run sources).
func (s *Store) RegisterBlob(ctx context.Context, digest string, size int64) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return registerBlob(ctx, tx, digest, size) })
}

// RunSource returns the source of the leased job's run, under the lease check.
func (s *Store) RunSource(ctx context.Context, runnerID, jobID string, l domain.Lease) (domain.Source, error) {
	var src domain.Source
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		return tx.QueryRow(ctx, `
			SELECT coalesce(source_digest, ''), coalesce(manifest_digest, ''), coalesce(source_size, 0)
			FROM runs WHERE id = $1`, job.RunID).Scan(&src.BlobDigest, &src.ManifestDigest, &src.Size)
	})
	if err == nil && src.BlobDigest == "" {
		return src, domain.Errorf(domain.ENotFound, "this run has no source snapshot")
	}
	return src, err
}

// CommitArtifact registers a verified blob as artifact name of the current
// attempt. Committing the same name and digest again is a no-op; another
// digest under the same name is EConflict.
func (s *Store) CommitArtifact(ctx context.Context, runnerID, jobID string, l domain.Lease, name, digest string, size int64) error {
	return s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if err := registerBlob(ctx, tx, digest, size); err != nil {
			return err
		}
		var stored string
		err := tx.QueryRow(ctx, `
			INSERT INTO artifacts (job_id, generation, name, digest, size) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (job_id, generation, name) DO UPDATE SET name = EXCLUDED.name
			RETURNING digest`, job.ID, job.Generation, name, digest, size).Scan(&stored)
		if err != nil {
			return fmt.Errorf("commit artifact: %w", err)
		}
		if stored != digest {
			return domain.Errorf(domain.EConflict, "artifact %q was already committed with digest %s", name, stored)
		}
		return nil
	})
}

// FindArtifact returns an artifact of a job the leased job needs, from the
// generation of that job that passed.
func (s *Store) FindArtifact(ctx context.Context, runnerID, jobID string, l domain.Lease, upstream, name string) (string, int64, error) {
	var digest string
	var size int64
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if !slices.Contains(job.Needs, upstream) {
			return domain.Errorf(domain.EForbidden, "job %q is not in this job's needs: artifacts come only from needed jobs", upstream)
		}
		err := tx.QueryRow(ctx, `
			SELECT a.digest, a.size FROM jobs u
			JOIN artifacts a ON a.job_id = u.id AND a.generation = u.generation
			WHERE u.run_id = $1 AND u.name = $2 AND u.state = 'PASSED' AND a.name = $3`,
			job.RunID, upstream, name).Scan(&digest, &size)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.ENotFound, "job %q has no artifact %q", upstream, name)
		}
		return err
	})
	return digest, size, err
}

// CacheHit is a restored cache entry.
type CacheHit struct {
	Key    string
	Digest string
	Size   int64
}

// RestoreCache finds the first of keys in the job's project: an exact key,
// or else the newest entry whose key starts with it (restore keys).
func (s *Store) RestoreCache(ctx context.Context, runnerID, jobID string, l domain.Lease, keys []string) (*CacheHit, error) {
	var hit *CacheHit
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		for _, k := range keys {
			var h CacheHit
			err := tx.QueryRow(ctx, `
				SELECT key, digest, size FROM caches
				WHERE project_id = $1 AND (key = $2 OR key LIKE $3 ESCAPE '\')
				ORDER BY key = $2 DESC, created_at DESC LIMIT 1`,
				job.ProjectID, k, likePrefix(k)).Scan(&h.Key, &h.Digest, &h.Size)
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("restore cache: %w", err)
			}
			hit = &h
			return nil
		}
		return nil
	})
	return hit, err
}

func likePrefix(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s) + "%"
}

// CommitCache stages a verified blob as cache entry key of the current
// attempt. It becomes visible to other jobs only if this attempt passes
// (finishAttempt), so a failing or stale job never writes a cache.
func (s *Store) CommitCache(ctx context.Context, runnerID, jobID string, l domain.Lease, key, digest string, size int64) error {
	return s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if err := registerBlob(ctx, tx, digest, size); err != nil {
			return err
		}
		var stored string
		err := tx.QueryRow(ctx, `
			INSERT INTO pending_caches (job_id, generation, key, digest, size) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (job_id, generation, key) DO UPDATE SET key = EXCLUDED.key
			RETURNING digest`, job.ID, job.Generation, key, digest, size).Scan(&stored)
		if err != nil {
			return fmt.Errorf("commit cache: %w", err)
		}
		if stored != digest {
			return domain.Errorf(domain.EConflict, "cache key %q was already saved with digest %s", key, stored)
		}
		return nil
	})
}

// CacheExists reports whether the project already has an entry for key
// (entries are immutable: the first passing job's save wins).
func (s *Store) CacheExists(ctx context.Context, runnerID, jobID string, l domain.Lease, key string) (bool, error) {
	var exists bool
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM caches WHERE project_id = $1 AND key = $2)`,
			job.ProjectID, key).Scan(&exists)
	})
	return exists, err
}

// promoteCaches publishes the pending caches of a passing attempt.
func promoteCaches(ctx context.Context, tx pgx.Tx, jobID string, generation int) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO caches (project_id, key, digest, size, job_id)
		SELECT r.project_id, p.key, p.digest, p.size, p.job_id
		FROM pending_caches p JOIN jobs j ON j.id = p.job_id JOIN runs r ON r.id = j.run_id
		WHERE p.job_id = $1 AND p.generation = $2
		ON CONFLICT (project_id, key) DO NOTHING`, jobID, generation)
	if err != nil {
		return fmt.Errorf("promote caches: %w", err)
	}
	return nil
}
