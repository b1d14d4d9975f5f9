-- +goose Up
-- When an API token stops working (NULL: never). A token made with an
-- expiring token expires no later than it, as it is revoked with it.
ALTER TABLE user_tokens ADD COLUMN expires_at timestamptz;

-- +goose Down
ALTER TABLE user_tokens DROP COLUMN expires_at;
