-- +goose Up
-- The API token whose request submitted a run's snapshot (NULL: a GitHub
-- project's run, the operator's, or one made before this column). A run
-- made again from the snapshot (a retry, a manual run, a schedule's
-- firing) keeps it. Revoking the token (a leaked one) stops what it left:
-- its snapshot is not run again, and its runs' jobs get no secrets and no
-- identity token.
ALTER TABLE runs ADD COLUMN source_token text;

-- +goose Down
ALTER TABLE runs DROP COLUMN source_token;
