-- +goose Up
-- Bounded storage: what a project keeps (retention, quotas), what the
-- garbage collector needs to find what nothing uses, and uploads that
-- were handed out but never committed.

ALTER TABLE projects ADD COLUMN retention_days integer NOT NULL DEFAULT 90
    CHECK (retention_days BETWEEN 1 AND 3650);
ALTER TABLE projects ADD COLUMN cache_quota_bytes bigint NOT NULL DEFAULT 10737418240
    CHECK (cache_quota_bytes BETWEEN 0 AND 1099511627776);
ALTER TABLE projects ADD COLUMN storage_quota_bytes bigint NOT NULL DEFAULT 214748364800
    CHECK (storage_quota_bytes BETWEEN 0 AND 109951162777600);

-- touched_at: when the blob was last registered or answered "exists";
-- the collector leaves blobs touched in the last two days alone, so a job
-- told "exists" still finds its blob when it commits.
ALTER TABLE blobs ADD COLUMN touched_at timestamptz NOT NULL DEFAULT now();

-- Presigned uploads handed out: an upload never committed is removed from
-- S3 after a day. Registering a blob removes its row.
CREATE TABLE uploads (
    s3_key     text PRIMARY KEY,
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX uploads_created ON uploads (created_at);

-- What the collector scans: finished runs by age, caches by use, and the
-- references of each blob (the foreign keys' referencing side).
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_source ON runs (project_id, trusted, source_digest) WHERE source_digest IS NOT NULL;
CREATE INDEX artifacts_blob ON artifacts (project_id, trusted, digest);
CREATE INDEX caches_blob ON caches (project_id, trusted, digest);
CREATE INDEX caches_used ON caches (project_id, last_used_at);
CREATE INDEX pending_caches_blob ON pending_caches (project_id, trusted, digest);
CREATE INDEX blobs_touched ON blobs (touched_at);
CREATE INDEX blobs_key ON blobs (s3_key);
CREATE INDEX scm_deliveries_finished ON scm_deliveries (finished_at) WHERE finished_at IS NOT NULL;

-- A job's log budget for the append's fast path: appends beyond it take
-- the slow path, which checks the attempt's and the run's limits exactly
-- and grants the next budget.
ALTER TABLE jobs ADD COLUMN log_limit bigint NOT NULL DEFAULT 0;

-- An ended attempt's log is compacted once: its chunks, one per append
-- however small, merged into chunks of up to 256 KiB, so that stored rows
-- grow with bytes rather than with the number of writes.
ALTER TABLE job_attempts ADD COLUMN log_compacted boolean NOT NULL DEFAULT false;
CREATE INDEX job_attempts_uncompacted ON job_attempts (ended_at) WHERE NOT log_compacted;

-- +goose Down
ALTER TABLE jobs DROP COLUMN log_limit;
DROP INDEX job_attempts_uncompacted;
ALTER TABLE job_attempts DROP COLUMN log_compacted;
DROP INDEX scm_deliveries_finished;
DROP INDEX blobs_key;
DROP INDEX blobs_touched;
DROP INDEX pending_caches_blob;
DROP INDEX caches_used;
DROP INDEX caches_blob;
DROP INDEX artifacts_blob;
DROP INDEX runs_source;
DROP INDEX runs_finished;
DROP TABLE uploads;
ALTER TABLE blobs DROP COLUMN touched_at;
ALTER TABLE projects DROP COLUMN storage_quota_bytes;
ALTER TABLE projects DROP COLUMN cache_quota_bytes;
ALTER TABLE projects DROP COLUMN retention_days;
