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

// Artifacts and caches: what a leased job reads and writes besides its
// log, each under the lease check, each a blob of its run's (project,
// tier) (blobs.go).

// runSourceSQL is run $1's source snapshot and its object, held by the
// run's (project, tier).
const runSourceSQL = `
SELECT r.source_digest, coalesce(r.manifest_digest, ''), b.size, b.s3_key
FROM runs r JOIN blobs b ON (b.project_id, b.trusted, b.digest) = (r.project_id, r.trusted, r.source_digest)
WHERE r.id = $1`

// runArtifactBytesSQL is the size of run $1's artifacts but artifact $4
// of job $2's attempt $3 (which a commit may repeat).
const runArtifactBytesSQL = `
SELECT coalesce(sum(a.size), 0) FROM artifacts a JOIN jobs j ON j.id = a.job_id
WHERE j.run_id = $1 AND NOT (a.job_id = $2 AND a.generation = $3 AND a.name = $4)`

// commitArtifactSQL records an artifact of an attempt, or finds it
// recorded: it returns the digest stored under the name.
const commitArtifactSQL = `
INSERT INTO artifacts (job_id, generation, name, digest, size, project_id, trusted) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (job_id, generation, name) DO UPDATE SET name = EXCLUDED.name
RETURNING digest`

// findArtifactSQL is artifact $3 of run $1's job $2, from the generation
// that passed.
const findArtifactSQL = `
SELECT a.digest, a.size, b.s3_key FROM jobs u
JOIN artifacts a ON a.job_id = u.id AND a.generation = u.generation
JOIN blobs b ON (b.project_id, b.trusted, b.digest) = (a.project_id, a.trusted, a.digest)
WHERE u.run_id = $1 AND u.name = $2 AND u.state = 'PASSED' AND a.name = $3`

// cacheScopesSQL is where run $1 restores caches from, in order: its own
// scope, its base branch, its project's default branch.
const cacheScopesSQL = `
SELECT array_remove(ARRAY[r.scope, r.base_ref, 'refs/heads/' || p.default_branch], NULL)
FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1`

// restoreCacheSQL finds the cache entry of project $1, scope $2 for key
// $4 (exact, or else the newest starting with it: $5 is its LIKE
// pattern); a trusted run ($3) reads only trusted entries. The hit is
// marked used: eviction goes least recently restored first.
const restoreCacheSQL = `
WITH hit AS (
    SELECT c.project_id, c.scope, c.trusted, c.key, c.digest, c.size, b.s3_key FROM caches c
    JOIN blobs b ON (b.project_id, b.trusted, b.digest) = (c.project_id, c.trusted, c.digest)
    WHERE c.project_id = $1 AND c.scope = $2 AND (c.trusted OR NOT $3)
      AND (c.key = $4 OR c.key LIKE $5 ESCAPE '\')
    ORDER BY c.key = $4 DESC, c.created_at DESC LIMIT 1
), used AS (
    UPDATE caches c SET last_used_at = now() FROM hit
    WHERE (c.project_id, c.scope, c.trusted, c.key) = (hit.project_id, hit.scope, hit.trusted, hit.key)
)
SELECT key, scope, digest, size, s3_key FROM hit`

// commitCacheSQL stages a cache save of an attempt, or finds it staged:
// it returns the digest staged under the key.
const commitCacheSQL = `
INSERT INTO pending_caches (job_id, generation, key, digest, size, project_id, trusted)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (job_id, generation, key) DO UPDATE SET key = EXCLUDED.key
RETURNING digest`

// cacheExistsSQL asks whether run $1's scope and tier have an entry for
// key $2.
const cacheExistsSQL = `
SELECT EXISTS (SELECT 1 FROM caches c JOIN runs r ON r.id = $1
               WHERE c.project_id = r.project_id AND c.scope = r.scope AND c.trusted = r.trusted AND c.key = $2)`

// promoteCachesSQL publishes the staged caches of job $1's passing
// attempt $2 into its run's scope and tier; the first save of a key wins.
const promoteCachesSQL = `
INSERT INTO caches (project_id, scope, trusted, key, digest, size, job_id)
SELECT r.project_id, r.scope, r.trusted, p.key, p.digest, p.size, p.job_id
FROM pending_caches p JOIN jobs j ON j.id = p.job_id JOIN runs r ON r.id = j.run_id
WHERE p.job_id = $1 AND p.generation = $2
ON CONFLICT (project_id, scope, trusted, key) DO NOTHING`

// RunSource returns the source of the leased job's run and where its bytes
// are, under the lease check.
func (s *Store) RunSource(ctx context.Context, runnerID, jobID string, l domain.Lease) (domain.Source, string, error) {
	var src domain.Source
	var key string
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		err := tx.QueryRow(ctx, runSourceSQL, job.RunID).Scan(&src.BlobDigest, &src.ManifestDigest, &src.Size, &key)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.ENotFound, "this run has no source snapshot")
		}
		return err
	})
	return src, key, err
}

// CommitArtifact registers a verified blob as artifact name of the current
// attempt, in the run's (project, tier). Committing the same name and
// digest again is a no-op; another digest under the same name is EConflict.
// The run's artifacts are summed under the project's quota lock, which
// every commit takes: parallel jobs' commits are counted one at a time.
func (s *Store) CommitArtifact(ctx context.Context, runnerID, jobID string, l domain.Lease, name, digest string, size int64) error {
	return s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if err := lockQuota(ctx, tx, job.ProjectID); err != nil {
			return err
		}
		var total int64
		if err := tx.QueryRow(ctx, runArtifactBytesSQL, job.RunID, job.ID, job.Generation, name).Scan(&total); err != nil {
			return fmt.Errorf("run artifact size: %w", err)
		}
		if total+size > s.limits.MaxRunArtifactBytes {
			return domain.Errorf(domain.ETooLarge, "the run's artifacts would total %d bytes, over the run limit of %d bytes",
				total+size, s.limits.MaxRunArtifactBytes)
		}
		return s.commitBlob(ctx, tx, job, "artifact", commitArtifactSQL, name, digest, size,
			"artifact %q was already committed with digest %s")
	})
}

// commitBlob registers a verified blob and records it under name for the
// leased job's attempt with query, which answers the digest the name holds:
// the same digest again is a no-op, another is EConflict (conflict's
// format, given the name and the stored digest).
func (s *Store) commitBlob(ctx context.Context, tx pgx.Tx, job *LeasedJob, kind, query, name, digest string, size int64, conflict string) error {
	if err := s.registerBlob(ctx, tx, BlobRef{job.ProjectID, job.Trusted, digest}, size); err != nil {
		return err
	}
	var stored string
	err := tx.QueryRow(ctx, query, job.ID, job.Generation, name, digest, size, job.ProjectID, job.Trusted).Scan(&stored)
	if err != nil {
		return fmt.Errorf("commit %s: %w", kind, err)
	}
	if stored != digest {
		return domain.Errorf(domain.EConflict, conflict, name, stored)
	}
	return nil
}

// FindArtifact returns an artifact of a job the leased job needs, from the
// generation of that job that passed.
func (s *Store) FindArtifact(ctx context.Context, runnerID, jobID string, l domain.Lease, upstream, name string) (Blob, error) {
	var b Blob
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		if !slices.Contains(job.Needs, upstream) {
			return domain.Errorf(domain.EForbidden, "job %q is not in this job's needs: artifacts come only from needed jobs", upstream)
		}
		err := tx.QueryRow(ctx, findArtifactSQL, job.RunID, upstream, name).Scan(&b.Digest, &b.Size, &b.Key)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.ENotFound, "job %q has no artifact %q", upstream, name)
		}
		return err
	})
	return b, err
}

// CacheHit is a restored cache entry.
type CacheHit struct {
	CacheKey string
	Scope    string
	Blob     Blob
}

// RestoreCache finds a cache entry for the leased job, as GitHub does: in
// the run's own scope first, then (a pull request) its base branch, then
// the project's default branch; in each scope, the first of keys that
// matches exactly, or else the newest entry whose key starts with it. A
// trusted run reads only entries trusted runs wrote.
func (s *Store) RestoreCache(ctx context.Context, runnerID, jobID string, l domain.Lease, keys []string) (*CacheHit, error) {
	var hit *CacheHit
	err := s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		var scopes []string
		if err := tx.QueryRow(ctx, cacheScopesSQL, job.RunID).Scan(&scopes); err != nil {
			return fmt.Errorf("cache scopes: %w", err)
		}
		for _, scope := range slices.Compact(scopes) {
			for _, k := range keys {
				// The hit is marked used: eviction goes least recently
				// restored first.
				var h CacheHit
				err := tx.QueryRow(ctx, restoreCacheSQL, job.ProjectID, scope, job.Trusted, k, likePrefix(k)).Scan(&h.CacheKey, &h.Scope, &h.Blob.Digest, &h.Blob.Size, &h.Blob.Key)
				if errors.Is(err, pgx.ErrNoRows) {
					continue
				}
				if err != nil {
					return fmt.Errorf("restore cache: %w", err)
				}
				hit = &h
				return nil
			}
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
// (finishAttempt), and only in the run's own scope and tier, so a failing
// or stale job never writes a cache and an untrusted one never writes
// where trusted runs read.
func (s *Store) CommitCache(ctx context.Context, runnerID, jobID string, l domain.Lease, key, digest string, size int64) error {
	return s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		return s.commitBlob(ctx, tx, job, "cache", commitCacheSQL, key, digest, size,
			"cache key %q was already saved with digest %s")
	})
}

// promoteCaches publishes the pending caches of a passing attempt into its
// run's scope and tier.
func promoteCaches(ctx context.Context, tx pgx.Tx, jobID string, generation int) error {
	_, err := tx.Exec(ctx, promoteCachesSQL, jobID, generation)
	if err != nil {
		return fmt.Errorf("promote caches: %w", err)
	}
	return nil
}
