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
-- whoever first submitted the snapshot in its project and tier.
UPDATE runs r SET source_by = CASE
    WHEN r.trigger LIKE 'cli:%' AND r.actor LIKE 'user:%' THEN r.actor
    ELSE (SELECT s.actor FROM runs s
          WHERE s.project_id = r.project_id AND s.trusted = r.trusted AND s.source_digest = r.source_digest
            AND s.trigger LIKE 'cli:%' AND s.actor LIKE 'user:%'
          ORDER BY s.number LIMIT 1) END
WHERE r.source_digest IS NOT NULL;

-- +goose Down
ALTER TABLE runs DROP COLUMN source_by;
