-- +goose Up
-- The delivery that made a run: how a waiting run with no check runs (a
-- fork's run of a commit a trusted run built) is known as its
-- repository's, and what deleting a run (ON DELETE SET NULL) looks up.
CREATE INDEX scm_deliveries_run ON scm_deliveries (run_id) WHERE run_id IS NOT NULL;

-- +goose Down
DROP INDEX scm_deliveries_run;
