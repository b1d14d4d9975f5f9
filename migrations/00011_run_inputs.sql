-- +goose Up
-- A manual run's inputs (on.workflow_dispatch), typed, as its expressions
-- read them (inputs.<name>).
ALTER TABLE runs ADD COLUMN inputs jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN inputs;
