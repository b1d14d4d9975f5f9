-- +goose Up
-- The token a token was made with (NULL: made by the operator, or before
-- this was kept). Revoking a token revokes those made with it, however
-- deep: whoever held a leaked token cannot keep a copy it minted.
ALTER TABLE user_tokens ADD COLUMN created_by_token text REFERENCES user_tokens (id) ON DELETE SET NULL;
CREATE INDEX user_tokens_created_by ON user_tokens (created_by_token) WHERE created_by_token IS NOT NULL;

-- +goose Down
ALTER TABLE user_tokens DROP COLUMN created_by_token;
