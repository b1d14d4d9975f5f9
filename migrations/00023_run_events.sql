-- +goose Up
-- When the event that made a run happened (a delivery's arrival), if not
-- when the run was made: a run of an older push that comes late (its
-- delivery retried) must not take its concurrency group from the run of
-- a newer one (shared/store/concurrency.go).
ALTER TABLE runs ADD COLUMN event_at timestamptz;

-- +goose Down
ALTER TABLE runs DROP COLUMN event_at;
