-- +goose Up
-- Flow control (docs/pipeline.md): a job's condition, evaluated by the
-- control plane when its needs end; whether the condition calls a status
-- function (then it replaces the rule that a job runs only after its
-- needs passed) and always() or cancelled() (then a run's cancel leaves
-- the job to decide); continue-on-error; the matrix's fail-fast and
-- max-parallel (per job_group, the job's name in the file); whether the
-- runner's expressions read needs (then the queue puts the needs context
-- into the spec); decided: the condition held and the job may be queued.
-- outputs are the current attempt's job outputs.
ALTER TABLE jobs ADD COLUMN job_group text;
ALTER TABLE jobs ADD COLUMN condition text;
ALTER TABLE jobs ADD COLUMN condition_status boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN survives_cancel boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN continue_on_error boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN fail_fast boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN max_parallel integer NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN reads_needs boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN decided boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN outputs jsonb;

-- +goose Down
ALTER TABLE jobs DROP COLUMN outputs;
ALTER TABLE jobs DROP COLUMN decided;
ALTER TABLE jobs DROP COLUMN reads_needs;
ALTER TABLE jobs DROP COLUMN max_parallel;
ALTER TABLE jobs DROP COLUMN fail_fast;
ALTER TABLE jobs DROP COLUMN continue_on_error;
ALTER TABLE jobs DROP COLUMN survives_cancel;
ALTER TABLE jobs DROP COLUMN condition_status;
ALTER TABLE jobs DROP COLUMN condition;
ALTER TABLE jobs DROP COLUMN job_group;
