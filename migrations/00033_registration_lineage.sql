-- +goose Up
-- The user token a registration token was made with (NULL: the operator's
-- call, or before this was kept). Revoking that token, or disabling its
-- user, expires the registration tokens it made that are still unused,
-- as it revokes the user tokens it made (00029): whoever held a leaked
-- admin token cannot keep a way in it minted.
ALTER TABLE registration_tokens ADD COLUMN created_by_token text REFERENCES user_tokens (id) ON DELETE SET NULL;
CREATE INDEX registration_tokens_created_by ON registration_tokens (created_by_token) WHERE created_by_token IS NOT NULL;

-- +goose Down
ALTER TABLE registration_tokens DROP COLUMN created_by_token;
