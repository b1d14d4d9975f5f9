-- +goose Up
-- A run's concurrency as its pipeline says it (group and
-- cancel-in-progress, before evaluation): a schedule's firing evaluates
-- it again with the new run's facts (a retry keeps the evaluated group).
ALTER TABLE runs ADD COLUMN concurrency_spec jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN concurrency_spec;
