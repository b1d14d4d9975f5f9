-- +goose Up
-- jobs_run (run_id) is a prefix of the unique index on (run_id, name),
-- which serves every lookup by run: the extra index only cost each job's
-- insert and update, and each new connection's first query on jobs.
DROP INDEX IF EXISTS jobs_run;

-- +goose Down
CREATE INDEX IF NOT EXISTS jobs_run ON jobs (run_id);
