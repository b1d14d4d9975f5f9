-- +goose Up
-- A project's configuration variables (the vars context, as GitHub's):
-- not secret, read by its members and every run of it, forks' included.
-- A run keeps the values it was made with (runs.vars), so a retry reads
-- what the first run read.
CREATE TABLE project_variables (
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (name ~ '^[A-Z_][A-Z0-9_]{0,99}$'),
    value      text NOT NULL CHECK (octet_length(value) <= 49152),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    PRIMARY KEY (project_id, name)
);
ALTER TABLE runs ADD COLUMN vars jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN vars;
DROP TABLE project_variables;
