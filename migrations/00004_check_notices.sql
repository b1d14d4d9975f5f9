-- +goose Up
-- A check run may also report a delivery that made no run because the
-- commit's pipeline file is missing or invalid: such a row has no job, and
-- its (failing) summary is written with it, so the author sees why on the
-- commit rather than nothing at all.
ALTER TABLE check_runs DROP CONSTRAINT check_runs_pkey;
ALTER TABLE check_runs ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
ALTER TABLE check_runs ALTER COLUMN job_id DROP NOT NULL;
-- Unique (NULLs apart): the jobs trigger finds a job's row by job_id.
CREATE UNIQUE INDEX check_runs_job ON check_runs (job_id);
ALTER TABLE check_runs ADD COLUMN delivery_guid text UNIQUE REFERENCES scm_deliveries (guid) ON DELETE CASCADE;
ALTER TABLE check_runs ADD COLUMN summary text;
ALTER TABLE check_runs ADD CONSTRAINT check_runs_subject CHECK ((job_id IS NULL) <> (delivery_guid IS NULL));

-- +goose Down
DELETE FROM check_runs WHERE job_id IS NULL;
ALTER TABLE check_runs DROP CONSTRAINT check_runs_subject;
ALTER TABLE check_runs DROP COLUMN summary;
ALTER TABLE check_runs DROP COLUMN delivery_guid;
DROP INDEX check_runs_job;
ALTER TABLE check_runs DROP COLUMN id;
ALTER TABLE check_runs ALTER COLUMN job_id SET NOT NULL;
ALTER TABLE check_runs ADD PRIMARY KEY (job_id);
