-- +goose Up
-- Log lines' times and step sections (docs/runner-protocol.md, logs):
-- each chunk keeps the marks its append carried, [[offset in the chunk,
-- unix ms], ...], and each attempt its steps as the runner reported them
-- (first report wins: a step's start, then its end, never rewritten).
ALTER TABLE log_chunks ADD COLUMN times jsonb;
CREATE TABLE job_steps (
    job_id      text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    generation  integer NOT NULL,
    idx         integer NOT NULL CHECK (idx >= 0),
    name        text NOT NULL,
    log_offset  bigint NOT NULL CHECK (log_offset >= 0),
    started_at  timestamptz NOT NULL,
    end_offset  bigint,
    finished_at timestamptz,
    exit_code   integer,
    conclusion  text CHECK (conclusion IN ('success', 'failure', 'skipped', 'cancelled')),
    PRIMARY KEY (job_id, generation, idx)
);

-- +goose Down
DROP TABLE job_steps;
ALTER TABLE log_chunks DROP COLUMN times;
