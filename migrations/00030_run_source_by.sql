-- +goose Up
-- The member whose submission (forgeci submit) a run's snapshot is:
-- "user:<id>", kept by the runs that run it again (a manual run, a
-- retry, a schedule firing), whose actor may be someone else. Running it
-- again checks that member still may (write, and secrets for a trusted
-- run): a member whose permission was taken away must not have their
-- code run with the secrets as another's. NULL: not a submission (a
-- GitHub project's snapshot is the repository's own ref).
ALTER TABLE runs ADD COLUMN source_by text;

-- Runs made before: a submission's is its own member; another run's,
-- whoever first submitted the snapshot in its project and tier; where
-- that submission is gone (past retention, a schedule's template kept),
-- in a project without a GitHub repository, the run's own member, as the
-- schedules checked before. One pass: the first submissions are found
-- once, not per run.
WITH first AS (
    SELECT DISTINCT ON (project_id, trusted, source_digest) project_id, trusted, source_digest, actor
    FROM runs WHERE trigger LIKE 'cli:%' AND actor LIKE 'user:%' AND source_digest IS NOT NULL
    ORDER BY project_id, trusted, source_digest, number
), found AS (
    SELECT r.id, CASE
        WHEN r.trigger LIKE 'cli:%' AND r.actor LIKE 'user:%' THEN r.actor
        WHEN f.actor IS NOT NULL THEN f.actor
        WHEN r.actor LIKE 'user:%' AND NOT EXISTS (SELECT 1 FROM scm_repositories g WHERE g.project_id = r.project_id)
            THEN r.actor END AS source_by
    FROM runs r LEFT JOIN first f USING (project_id, trusted, source_digest)
    WHERE r.source_digest IS NOT NULL
)
UPDATE runs r SET source_by = found.source_by FROM found
WHERE r.id = found.id AND found.source_by IS NOT NULL;

-- +goose Down
ALTER TABLE runs DROP COLUMN source_by;
