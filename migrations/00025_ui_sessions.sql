-- +goose Up
-- Dashboard sessions. Signing in with an API token opens one; the cookie
-- carries its secret, never the token, so a copied cookie is not a
-- credential of the API and ends at expires_at, at sign-out, or with the
-- token it was opened with (revoked) or its user (disabled).
CREATE TABLE ui_sessions (
    secret_hash bytea PRIMARY KEY CHECK (length(secret_hash) = 32),
    token_id    text NOT NULL REFERENCES user_tokens (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_at);
CREATE INDEX ui_sessions_token ON ui_sessions (token_id);

-- +goose Down
DROP TABLE ui_sessions;
