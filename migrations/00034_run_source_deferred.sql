-- +goose Up
-- A run's creation registers its snapshot's blob last, after it has
-- locked the jobs its concurrency group cancels: a commit of the same
-- bytes holds its job's row and then the blob's key, and the other order
-- deadlocked with it. The run's row comes first and names the blob, so
-- the check that the blob row exists waits for the commit (deferred
-- always, rather than by a SET CONSTRAINTS in each creation, which RDS
-- Proxy may take as a session setting and pin the connection for; no
-- other statement sets a run's source but to NULL).
ALTER TABLE runs ALTER CONSTRAINT runs_source_fkey DEFERRABLE INITIALLY DEFERRED;

-- +goose Down
ALTER TABLE runs ALTER CONSTRAINT runs_source_fkey NOT DEFERRABLE;
