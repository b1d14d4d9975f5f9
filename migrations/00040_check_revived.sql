-- +goose Up
-- A check run GitHub refused as gone for long (waiting hours, or given
-- up) is pushed again once GitHub takes a push for its repository (the
-- App back, the access restored): at most once until its job changes or
-- it is pushed, so that one whose own push GitHub refuses (a commit gone
-- from the repository) costs one push more, not one per push of the
-- others (package scm, reviveRefused).
ALTER TABLE check_runs ADD COLUMN revived boolean NOT NULL DEFAULT false;
CREATE INDEX check_runs_refused ON check_runs (repository_id) WHERE gone_attempts > 0 AND NOT revived;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION check_runs_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE check_runs SET version = version + 1, next_attempt_at = now(), attempts = 0, gone_attempts = 0,
                          revived = false
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION check_runs_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE check_runs SET version = version + 1, next_attempt_at = now(), attempts = 0, gone_attempts = 0
    WHERE job_id = NEW.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
DROP INDEX check_runs_refused;
ALTER TABLE check_runs DROP COLUMN revived;
