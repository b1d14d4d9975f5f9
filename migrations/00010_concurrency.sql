-- +goose Up
-- Concurrency groups (docs/pipeline.md): a run's group, evaluated from
-- the pipeline's concurrency.group when the run is made (lower case: names
-- ignore case, as GitHub's), and whether it waits for the group's run in
-- progress to end; concurrency_cancel: it canceled the run in progress
-- (cancel-in-progress). The facts workflow and head_ref are kept for
-- retries.
ALTER TABLE runs ADD COLUMN concurrency_group text;
ALTER TABLE runs ADD COLUMN concurrency_waiting boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD COLUMN concurrency_cancel boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD COLUMN workflow text;
ALTER TABLE runs ADD COLUMN head_ref text;
-- The open runs of each group: what a new run and an ending one look for.
CREATE INDEX runs_concurrency_open ON runs (project_id, concurrency_group)
    WHERE concurrency_group IS NOT NULL AND state IN ('PENDING', 'RUNNING');

-- +goose Down
DROP INDEX runs_concurrency_open;
ALTER TABLE runs DROP COLUMN head_ref;
ALTER TABLE runs DROP COLUMN workflow;
ALTER TABLE runs DROP COLUMN concurrency_cancel;
ALTER TABLE runs DROP COLUMN concurrency_waiting;
ALTER TABLE runs DROP COLUMN concurrency_group;
