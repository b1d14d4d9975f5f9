-- +goose Up
-- People and their API tokens. Roles: admin (everything), write (submit,
-- cancel, retry), read (look).
CREATE TABLE users (
    id         text PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    role       text NOT NULL CHECK (role IN ('admin', 'write', 'read')),
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);

CREATE TABLE user_tokens (
    id           text PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    description  text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- +goose Down
DROP TABLE user_tokens;
DROP TABLE users;
