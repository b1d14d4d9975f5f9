-- +goose Up
-- A check run's pushes refused as gone (the App uninstalled, the
-- repository deleted), in a row: counted apart from its failures, so that
-- an outage's failures do not bring its give-up nearer (package scm,
-- DefaultMaxCheckAttempts). A job change starts both counts again.
ALTER TABLE check_runs ADD COLUMN gone_attempts integer NOT NULL DEFAULT 0;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION check_runs_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE check_runs SET version = version + 1, next_attempt_at = now(), attempts = 0, gone_attempts = 0
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION check_runs_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE check_runs SET version = version + 1, next_attempt_at = now(), attempts = 0
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
ALTER TABLE check_runs DROP COLUMN gone_attempts;
