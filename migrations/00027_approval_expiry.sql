-- +goose Up
-- The collector rejects runs left waiting for approval (shared/store/approvalgc.go).
CREATE INDEX runs_awaiting_approval ON runs (created_at) WHERE approval = 'pending' AND finished_at IS NULL;

-- +goose Down
DROP INDEX runs_awaiting_approval;
