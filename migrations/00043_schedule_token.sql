-- +goose Up
-- The API token whose request made the run that set a schedule (NULL: set
-- by a GitHub repository's default branch, or before this column). A
-- schedule runs its run's snapshot again, with the project's secrets, long
-- after the request: revoking the token (a leaked one) removes the
-- schedules it set, and a firing checks it in its transaction.
ALTER TABLE schedules ADD COLUMN set_by_token text;

-- +goose Down
ALTER TABLE schedules DROP COLUMN set_by_token;
