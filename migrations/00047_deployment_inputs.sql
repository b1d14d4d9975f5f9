-- +goose Up
-- A manual run's inputs as its deployment was gated with them (NULL:
-- none): they reach the steps' scripts, so the history keeps what was
-- deployed with what, after the run itself is gone.
ALTER TABLE deployments ADD COLUMN inputs jsonb;

-- +goose Down
ALTER TABLE deployments DROP COLUMN inputs;
