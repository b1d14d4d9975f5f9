-- +goose Up
-- The member who retried a run ("user:<id>"; NULL: not a retry by a
-- member). A retry keeps its run's actor, whose run it repeats; the one
-- who asked for it may not approve its deployments where an environment
-- prevents self-review, and must still be allowed to start trusted runs
-- when one is approved.
ALTER TABLE runs ADD COLUMN retried_by text;

-- +goose Down
ALTER TABLE runs DROP COLUMN retried_by;
