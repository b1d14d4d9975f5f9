-- +goose Up
-- The summary of an attempt's test reports (reports: junit), as its
-- runner sent it under the lease (protocol.TestSummary); a second one
-- replaces the first. The counts are columns for the run view.
CREATE TABLE job_reports (
    job_id     text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    generation integer NOT NULL,
    tests      integer NOT NULL,
    passed     integer NOT NULL,
    failed     integer NOT NULL,
    errored    integer NOT NULL,
    skipped    integer NOT NULL,
    summary    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, generation)
);

-- +goose Down
DROP TABLE job_reports;
