-- +goose Up
-- A commit's notice (the failing "forgeci" check run of a delivery that
-- made no run) is queued once per commit: the queueing looks for one.
CREATE INDEX check_runs_notices ON check_runs (repository_id, head_sha) WHERE delivery_guid IS NOT NULL;

-- +goose Down
DROP INDEX check_runs_notices;
