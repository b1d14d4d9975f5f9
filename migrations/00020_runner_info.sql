-- +goose Up
-- What a runner says of itself when it polls for work: its version, how
-- many jobs it runs at once, and the features it declares (for the queue
-- page: which runners could take a job).
ALTER TABLE runners ADD COLUMN version text;
ALTER TABLE runners ADD COLUMN slots integer;
ALTER TABLE runners ADD COLUMN features text[];
-- A runner's recent attempts, for the runners page.
CREATE INDEX job_attempts_runner ON job_attempts (runner_id, ended_at);

-- +goose Down
DROP INDEX job_attempts_runner;
ALTER TABLE runners DROP COLUMN features;
ALTER TABLE runners DROP COLUMN slots;
ALTER TABLE runners DROP COLUMN version;
