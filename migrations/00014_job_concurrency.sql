-- +goose Up
-- Job concurrency groups (docs/pipeline.md): concurrency_template is the
-- job's group as the pipeline says it (the matrix filled in; with
-- concurrency_cancel or the expression concurrency_cancel_expr), evaluated
-- into concurrency_group when the job's needs have ended; the job then
-- waits (concurrency_waiting) until settleJobGroup lets it go on, from
-- concurrency_at, the time it joined its group.
ALTER TABLE jobs ADD COLUMN concurrency_template text;
ALTER TABLE jobs ADD COLUMN concurrency_cancel boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN concurrency_cancel_expr text;
ALTER TABLE jobs ADD COLUMN concurrency_group text;
ALTER TABLE jobs ADD COLUMN concurrency_waiting boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN concurrency_at timestamptz;
-- The open jobs of each group: what settling a group reads.
CREATE INDEX jobs_concurrency_open ON jobs (project_id, concurrency_group)
    WHERE concurrency_group IS NOT NULL AND state IN ('PENDING', 'QUEUED', 'RUNNING');

-- +goose Down
DROP INDEX jobs_concurrency_open;
ALTER TABLE jobs DROP COLUMN concurrency_at;
ALTER TABLE jobs DROP COLUMN concurrency_waiting;
ALTER TABLE jobs DROP COLUMN concurrency_group;
ALTER TABLE jobs DROP COLUMN concurrency_cancel_expr;
ALTER TABLE jobs DROP COLUMN concurrency_cancel;
ALTER TABLE jobs DROP COLUMN concurrency_template;
