package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// gcPlanSQL counts what each step of a collection but the blobs' would
// remove now ($1 to $5: the deliveries', idle caches', uploads', waiting
// approvals' and push bodies' ages in seconds).
const gcPlanSQL = `
SELECT
  (SELECT count(*) FROM runs r JOIN projects p ON p.id = r.project_id
   WHERE r.finished_at < now() - make_interval(days => p.retention_days)),
  (SELECT count(*) FROM scm_deliveries WHERE finished_at < now() - make_interval(secs => $1)),
  (SELECT count(*) FROM pending_caches p JOIN jobs j ON j.id = p.job_id
   WHERE j.generation <> p.generation OR j.state NOT IN ('QUEUED', 'RUNNING')),
  (SELECT count(*) FROM caches WHERE last_used_at < now() - make_interval(secs => $2)),
  (SELECT count(*) FROM (` + cachesKeptSQL + `) ranked WHERE kept > quota),
  (SELECT count(*) FROM uploads u WHERE u.created_at < now() - make_interval(secs => $3)
   AND NOT EXISTS (SELECT 1 FROM blobs WHERE s3_key = u.s3_key)),
  (SELECT count(*) FROM job_attempts WHERE NOT log_compacted),
  (SELECT count(*) FROM runs WHERE approval = 'pending' AND finished_at IS NULL
   AND created_at < now() - make_interval(secs => $4)),
  (SELECT count(*) FROM scm_push_bodies WHERE received_at < now() - make_interval(secs => $5))`

// gcPlanBlobsSQL counts the blobs unreferenced and untouched for $1 seconds.
const gcPlanBlobsSQL = `
SELECT count(*), coalesce(sum(b.size), 0) FROM blobs b
WHERE b.touched_at < now() - make_interval(secs => $1) AND ` + unreferencedSQL

// projectStorageSQL is what project $1 keeps, if user $2 may read it.
const projectStorageSQL = `
SELECT (SELECT count(*) FROM runs WHERE project_id = p.id),
       (SELECT coalesce(sum(a.log_size), 0) FROM job_attempts a JOIN jobs j ON j.id = a.job_id
        JOIN runs r ON r.id = j.run_id WHERE r.project_id = p.id)
     + (SELECT coalesce(sum(j.log_size), 0) FROM jobs j JOIN runs r ON r.id = j.run_id
        WHERE r.project_id = p.id AND j.state = 'RUNNING'),
       (SELECT coalesce(sum(size), 0) FROM artifacts WHERE project_id = p.id),
       (SELECT coalesce(sum(size), 0) FROM caches WHERE project_id = p.id),
       (SELECT coalesce(sum(size), 0) FROM blobs WHERE project_id = p.id),
       p.retention_days, p.cache_quota_bytes, p.storage_quota_bytes, p.badges_public
FROM projects p WHERE p.id = $1 AND project_rank($2, p.id) >= 1`

// gcPlan counts what a collection would remove now, deleting nothing. Blobs
// count only those unreferenced already: the runs and caches a collection
// removes first free more.
func (s *Store) gcPlan(ctx context.Context, o GCOptions) (GCResult, error) {
	var r GCResult
	err := s.pool.QueryRow(ctx, gcPlanSQL, o.DeliveryTTL.Seconds(), o.CacheIdle.Seconds(), o.UploadTTL.Seconds(), o.ApprovalTTL.Seconds(),
		PushMemory.Seconds()).Scan(
		&r.Runs, &r.Deliveries, &r.PendingCaches, &r.CachesIdle, &r.CachesOverQuota, &r.Uploads, &r.LogsCompacted, &r.ApprovalsExpired, &r.PushBodies)
	if err != nil {
		return r, fmt.Errorf("gc plan: %w", err)
	}
	err = s.pool.QueryRow(ctx, gcPlanBlobsSQL, o.BlobGrace.Seconds()).Scan(&r.Blobs, &r.BlobBytes)
	if err != nil {
		return r, fmt.Errorf("gc plan: %w", err)
	}
	r.Done = r == GCResult{}
	return r, nil
}

// Storage is what one project keeps, and its limits.
type Storage struct {
	Runs              int64 `json:"runs"`
	LogBytes          int64 `json:"log_bytes"`
	ArtifactBytes     int64 `json:"artifact_bytes"`
	CacheBytes        int64 `json:"cache_bytes"`
	BlobBytes         int64 `json:"blob_bytes"` // sources, artifacts and caches in S3, each blob once
	RetentionDays     int   `json:"retention_days"`
	CacheQuotaBytes   int64 `json:"cache_quota_bytes"`
	StorageQuotaBytes int64 `json:"storage_quota_bytes"`
	BadgesPublic      bool  `json:"badges_public"`
}

// ProjectStorage returns what a project u may read keeps.
func (s *Store) ProjectStorage(ctx context.Context, u User, projectID string) (Storage, error) {
	var st Storage
	err := s.pool.QueryRow(ctx, projectStorageSQL, projectID, u.ID).Scan(
		&st.Runs, &st.LogBytes, &st.ArtifactBytes, &st.CacheBytes, &st.BlobBytes,
		&st.RetentionDays, &st.CacheQuotaBytes, &st.StorageQuotaBytes, &st.BadgesPublic)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, domain.Errorf(domain.ENotFound, "project %s not found", projectID)
	}
	if err != nil {
		return st, fmt.Errorf("storage of project %s: %w", projectID, err)
	}
	return st, nil
}
