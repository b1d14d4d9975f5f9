-- +goose Up
-- The runner features a job needs (step if/id/shell, ...): a claim takes
-- only jobs whose features the claiming runner declared, so a runner built
-- to the first protocol never runs a step it should have skipped.
ALTER TABLE jobs ADD COLUMN features text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE jobs DROP COLUMN features;
