-- +goose Up
-- Schedules (on.schedule) follow the default branch's pipeline: a trusted
-- run of that branch made from a parsed pipeline replaces its project's
-- rows, and its run is what each firing runs again (template_run_id).
CREATE TABLE schedules (
    id              text PRIMARY KEY,
    project_id      text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    cron            text NOT NULL,
    missed          text NOT NULL CHECK (missed IN ('run-once', 'skip')),
    template_run_id text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, cron)
);

-- Each (project, cron, slot) fires at most once, whoever fires it: the
-- primary key, not a hope. A skipped slot is recorded too (run_id NULL).
CREATE TABLE schedule_firings (
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    cron       text NOT NULL,
    slot       timestamptz NOT NULL,
    fired_at   timestamptz NOT NULL DEFAULT now(),
    run_id     text,
    skipped    boolean NOT NULL DEFAULT false,
    note       text,
    PRIMARY KEY (project_id, cron, slot)
);

-- +goose Down
DROP TABLE schedule_firings;
DROP TABLE schedules;
