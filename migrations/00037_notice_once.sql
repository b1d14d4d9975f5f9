-- +goose Up
-- A commit's notice (the failing "forgeci" check run of a delivery that
-- made no run) is queued once per commit. Looking for one first was not
-- enough: two deliveries failing at once for the same commit (its push and
-- its pull request) each missed the other's uncommitted notice, and both
-- queued one. Notices queued twice already keep their first; the table
-- is locked first, so that none is queued between the two statements.
LOCK TABLE check_runs IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM check_runs c
WHERE c.delivery_guid IS NOT NULL
  AND EXISTS (SELECT 1 FROM check_runs o
              WHERE o.delivery_guid IS NOT NULL AND o.repository_id = c.repository_id
                AND o.head_sha = c.head_sha AND o.name = c.name AND o.id < c.id);
DROP INDEX check_runs_notices;
CREATE UNIQUE INDEX check_runs_notices ON check_runs (repository_id, head_sha, name) WHERE delivery_guid IS NOT NULL;

-- +goose Down
DROP INDEX check_runs_notices;
CREATE INDEX check_runs_notices ON check_runs (repository_id, head_sha) WHERE delivery_guid IS NOT NULL;
