package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// What people get of a run's artifacts: the list, and a blob to download,
// each only for a user who may read the run's project (checked in the
// statement that reads them).

// ArtifactInfo is an artifact as people see it: the job that made it (its
// current attempt's), its name, size and digest, and when it goes (with
// its run, at the project's retention).
type ArtifactInfo struct {
	JobID      string     `json:"job_id"`
	Job        string     `json:"job"`
	Generation int        `json:"generation"`
	Name       string     `json:"name"`
	Digest     string     `json:"digest"`
	Size       int64      `json:"size"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"` // none while the run is open
}

// runArtifactsSQL lists the artifacts of run $1 (its jobs' current
// attempts), for user $2 who may read its project.
const runArtifactsSQL = `
SELECT j.id, j.name, a.generation, a.name, a.digest, a.size, a.created_at,
       r.finished_at + make_interval(days => p.retention_days)
FROM runs r JOIN projects p ON p.id = r.project_id
JOIN jobs j ON j.run_id = r.id
JOIN artifacts a ON a.job_id = j.id AND a.generation = j.generation
WHERE r.id = $1 AND project_rank($2, r.project_id) >= 1
ORDER BY j.created_at, j.id, a.name`

// runReadableSQL says whether run $1 exists for user $2.
const runReadableSQL = `SELECT EXISTS (SELECT 1 FROM runs r WHERE r.id = $1 AND project_rank($2, r.project_id) >= 1)`

// RunArtifacts lists a run's artifacts for a user who may read it.
func (s *Store) RunArtifacts(ctx context.Context, u User, runID string) ([]ArtifactInfo, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, runReadableSQL, runID, u.ID).Scan(&ok); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if !ok {
		return nil, domain.Errorf(domain.ENotFound, "run %s not found", runID)
	}
	rows, err := s.pool.Query(ctx, runArtifactsSQL, runID, u.ID)
	if err != nil {
		return nil, fmt.Errorf("artifacts: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ArtifactInfo, error) {
		var a ArtifactInfo
		return a, row.Scan(&a.JobID, &a.Job, &a.Generation, &a.Name, &a.Digest, &a.Size, &a.CreatedAt, &a.ExpiresAt)
	})
}

// artifactBlobSQL is artifact $3 of job $2 (its current attempt's) of run
// $1, with its blob's key, for user $4 who may read the project.
const artifactBlobSQL = `
SELECT a.digest, a.size, b.s3_key FROM runs r
JOIN jobs j ON j.run_id = r.id
JOIN artifacts a ON a.job_id = j.id AND a.generation = j.generation
JOIN blobs b ON (b.project_id, b.trusted, b.digest) = (a.project_id, a.trusted, a.digest)
WHERE r.id = $1 AND j.id = $2 AND a.name = $3 AND project_rank($4, r.project_id) >= 1`

// ArtifactBlob is the blob of an artifact, for a user who may read its
// run: what a presigned download is issued for.
func (s *Store) ArtifactBlob(ctx context.Context, u User, runID, jobID, name string) (Blob, error) {
	var b Blob
	err := s.pool.QueryRow(ctx, artifactBlobSQL, runID, jobID, name, u.ID).Scan(&b.Digest, &b.Size, &b.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, domain.Errorf(domain.ENotFound, "run %s has no artifact %q of job %s", runID, name, jobID)
	}
	return b, err
}
