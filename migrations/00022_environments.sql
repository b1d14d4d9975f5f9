-- +goose Up
-- Environments and deployments (docs/deployments.md). An environment's
-- rules gate the jobs that name it when their needs end: reviewers of a
-- role approve each deployment, and only allowed refs deploy at all.
-- Names are lower case: the pipeline's are folded, so "Production" is
-- held to the rules of "production".
CREATE TABLE environments (
    project_id    text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name          text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    reviewer_role text CHECK (reviewer_role IN ('write', 'admin')),
    allowed_refs  text[] NOT NULL DEFAULT '{}',
    -- The run's own member may not approve its deployment.
    prevent_self_review boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, name)
);

-- A deployment is a job's decision to deploy, one per time its needs end
-- (a retry is a new run and a new deployment). It outlives its run's
-- retention: the history keeps the run's number and the job's name.
CREATE TABLE deployments (
    id          bigserial PRIMARY KEY,
    project_id  text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    environment text NOT NULL,
    run_id      text REFERENCES runs (id) ON DELETE SET NULL,
    job_id      text REFERENCES jobs (id) ON DELETE SET NULL,
    run_number  bigint NOT NULL,
    job_name    text NOT NULL,
    trigger     text NOT NULL,
    dirty       boolean NOT NULL,
    ref         text NOT NULL,
    sha         text NOT NULL,
    url         text,
    decision    text NOT NULL CHECK (decision IN ('waiting', 'approved', 'rejected', 'refused', 'automatic')),
    reason      text,
    decided_by  text,
    decided_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deployments_environment ON deployments (project_id, environment, id DESC);
CREATE UNIQUE INDEX deployments_one_waiting ON deployments (job_id) WHERE decision = 'waiting';

-- A job's environment: the template (from its spec), and once decided
-- the name and whether it waits for a review or may go on.
ALTER TABLE jobs ADD COLUMN environment_template text,
                 ADD COLUMN environment text,
                 ADD COLUMN deploy_state text CHECK (deploy_state IN ('waiting', 'approved'));

-- Environment secrets: '' is the project's own.
ALTER TABLE project_secrets ADD COLUMN environment text NOT NULL DEFAULT '';
ALTER TABLE project_secrets DROP CONSTRAINT project_secrets_pkey;
ALTER TABLE project_secrets ADD PRIMARY KEY (project_id, environment, name);

-- Identity tokens issued, for audit: the lease each was bound to.
CREATE TABLE id_tokens (
    jti        uuid PRIMARY KEY,
    job_id     text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    generation integer NOT NULL,
    lease_id   uuid NOT NULL,
    audience   text NOT NULL,
    issued_at  timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX id_tokens_job ON id_tokens (job_id);

-- +goose Down
DROP TABLE id_tokens;
DELETE FROM project_secrets WHERE environment <> '';
ALTER TABLE project_secrets DROP CONSTRAINT project_secrets_pkey;
ALTER TABLE project_secrets ADD PRIMARY KEY (project_id, name);
ALTER TABLE project_secrets DROP COLUMN environment;
ALTER TABLE jobs DROP COLUMN deploy_state, DROP COLUMN environment, DROP COLUMN environment_template;
DROP TABLE deployments;
DROP TABLE environments;
