-- +goose Up
-- GitHub integration: registered repositories, webhook deliveries as
-- reclaimable leased work, and the check-run outbox. Project secrets, which
-- runs from forks do not get.

-- A repository ForgeCI builds. github_id is GitHub's numeric repository ID
-- (stable across renames). The webhook secret is kept in plain text because
-- verifying an HMAC needs it.
CREATE TABLE scm_repositories (
    github_id       bigint PRIMARY KEY CHECK (github_id > 0),
    full_name       text NOT NULL UNIQUE CHECK (full_name ~ '^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$'),
    installation_id bigint NOT NULL CHECK (installation_id > 0),
    webhook_secret  text NOT NULL CHECK (length(webhook_secret) >= 16),
    project         text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- One row per webhook delivery, keyed by GitHub's delivery GUID: a
-- redelivery with the same GUID finds its row and adds nothing. Processing
-- is leased like jobs, but an expired delivery lease is simply reclaimed:
-- processing is idempotent, and its effect (the run) commits in the same
-- transaction that marks the delivery DONE.
CREATE TABLE scm_deliveries (
    guid             text PRIMARY KEY CHECK (length(guid) BETWEEN 1 AND 100),
    event            text NOT NULL,
    repository_id    bigint NOT NULL REFERENCES scm_repositories (github_id) ON DELETE CASCADE,
    payload          bytea NOT NULL,
    state            text NOT NULL DEFAULT 'PENDING'
                     CHECK (state IN ('PENDING', 'DONE', 'IGNORED', 'FAILED')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_id         uuid,
    lease_expires_at timestamptz,
    last_error       text,
    run_id           text REFERENCES runs (id) ON DELETE SET NULL,
    note             text,
    received_at      timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    CHECK ((state = 'PENDING') = (finished_at IS NULL))
);
CREATE INDEX scm_deliveries_pending ON scm_deliveries (next_attempt_at) WHERE state = 'PENDING';

-- The check-run outbox: one row per job of a GitHub-triggered run. The job
-- row is the desired state; every change of a job's state bumps version
-- here in the same transaction (the trigger below), and the reconciler
-- pushes until pushed_version catches up. create_attempted is committed
-- before a create is sent, so a create whose response was lost is looked
-- up by external_id instead of being sent twice.
CREATE TABLE check_runs (
    job_id           text PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    repository_id    bigint NOT NULL REFERENCES scm_repositories (github_id) ON DELETE CASCADE,
    head_sha         text NOT NULL CHECK (head_sha ~ '^[0-9a-f]{40}$'),
    name             text NOT NULL,
    version          bigint NOT NULL DEFAULT 1,
    pushed_version   bigint NOT NULL DEFAULT 0,
    github_id        bigint,
    create_attempted boolean NOT NULL DEFAULT false,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_id         uuid,
    lease_expires_at timestamptz,
    last_error       text
);
CREATE INDEX check_runs_due ON check_runs (next_attempt_at) WHERE version > pushed_version;

-- +goose StatementBegin
CREATE FUNCTION check_runs_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE check_runs SET version = version + 1, next_attempt_at = now(), attempts = 0
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER jobs_check_runs AFTER UPDATE OF state ON jobs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION check_runs_bump();

-- Secrets of a project, given to its jobs' environments unless the run was
-- created without secrets (a pull request from a fork).
CREATE TABLE project_secrets (
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (name ~ '^[A-Z_][A-Z0-9_]{0,99}$'),
    value      text NOT NULL CHECK (length(value) BETWEEN 1 AND 65536),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, name)
);

ALTER TABLE runs ADD COLUMN secrets_allowed boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE runs DROP COLUMN secrets_allowed;
DROP TABLE project_secrets;
DROP TRIGGER jobs_check_runs ON jobs;
DROP FUNCTION check_runs_bump();
DROP TABLE check_runs;
DROP TABLE scm_deliveries;
DROP TABLE scm_repositories;
