-- +goose Up
-- When a deployment was let through (by the gate, or a review), the time
-- of its environment's rules then (environments.updated_at, which now
-- moves only when the rules change; NULL: the environment had none). A
-- claim takes an approved deployment only while those are still its
-- environment's rules: one whose rules changed since is gated again
-- (package store, deployregate.go) before it may run.
ALTER TABLE jobs ADD COLUMN deploy_rules_at timestamptz;
-- Those let through before: under the rules as they are.
UPDATE jobs j SET deploy_rules_at = e.updated_at FROM environments e
WHERE j.deploy_state = 'approved' AND j.state IN ('PENDING', 'QUEUED', 'RUNNING')
  AND e.project_id = j.project_id AND e.name = j.environment;
-- The deployments let through that have not started, for the sweeper's
-- look for those whose rules changed.
CREATE INDEX jobs_deploy_approved ON jobs (project_id, environment)
    WHERE deploy_state = 'approved' AND state IN ('PENDING', 'QUEUED');

-- +goose Down
DROP INDEX jobs_deploy_approved;
ALTER TABLE jobs DROP COLUMN deploy_rules_at;
