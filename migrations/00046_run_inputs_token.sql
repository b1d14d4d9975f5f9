-- +goose Up
-- The API token whose request gave a manual run's inputs (NULL: no
-- inputs, or before this column). Inputs reach the steps' scripts, as the
-- snapshot does: while the token is revoked the run is not made again with
-- them. token_revoked: the revocation of the token a run's snapshot or
-- inputs were given with marks the run, in its transaction, so that a
-- claim reads it off the run's row rather than probing the tokens for
-- every trusted job.
ALTER TABLE runs ADD COLUMN inputs_token text;
ALTER TABLE runs ADD COLUMN token_revoked boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE runs DROP COLUMN token_revoked;
ALTER TABLE runs DROP COLUMN inputs_token;
