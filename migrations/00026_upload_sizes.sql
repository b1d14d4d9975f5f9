-- +goose Up
-- An upload handed out and not yet committed counts against its project's
-- storage quota (and its tier's share) at the size it was asked for: a
-- job asking for many uploads and never committing them stored bytes
-- outside any quota. Rows from before count as nothing.
ALTER TABLE uploads ADD COLUMN size bigint NOT NULL DEFAULT 0 CHECK (size >= 0);
ALTER TABLE uploads ADD COLUMN trusted boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE uploads DROP COLUMN trusted;
ALTER TABLE uploads DROP COLUMN size;
