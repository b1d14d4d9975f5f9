-- +goose Up
-- Runners have a scope: the projects they serve (none listed: every
-- project) and whether they take untrusted work (pull requests from forks,
-- runs of members without the secrets permission). A registration token
-- carries the scope to the runner it registers. Runners registered before
-- scopes serve every project but no untrusted work: a fork's jobs wait for
-- a runner registered to take them.
ALTER TABLE registration_tokens ADD COLUMN projects text[] NOT NULL DEFAULT '{}';
ALTER TABLE registration_tokens ADD COLUMN untrusted boolean NOT NULL DEFAULT false;
ALTER TABLE runners ADD COLUMN projects text[] NOT NULL DEFAULT '{}';
ALTER TABLE runners ADD COLUMN untrusted boolean NOT NULL DEFAULT false;

-- A job carries its run's project and tier, so that a claim can match a
-- runner's scope on the job row alone.
ALTER TABLE jobs ADD COLUMN project_id text;
ALTER TABLE jobs ADD COLUMN trusted boolean;
UPDATE jobs j SET project_id = r.project_id, trusted = r.trusted FROM runs r WHERE r.id = j.run_id;
ALTER TABLE jobs ALTER COLUMN project_id SET NOT NULL;
ALTER TABLE jobs ALTER COLUMN trusted SET NOT NULL;

-- +goose Down
ALTER TABLE jobs DROP COLUMN trusted;
ALTER TABLE jobs DROP COLUMN project_id;
ALTER TABLE runners DROP COLUMN untrusted;
ALTER TABLE runners DROP COLUMN projects;
ALTER TABLE registration_tokens DROP COLUMN untrusted;
ALTER TABLE registration_tokens DROP COLUMN projects;
