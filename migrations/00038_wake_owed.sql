-- +goose Up
-- Wake-up notes a scheduled pass's write could not make (S3 refused them)
-- though the write committed: owed in its transaction, and made by the
-- next pass of any kind, in whichever container it runs. A process's
-- memory was not enough: the next pass may run in another.
CREATE TABLE wake_owed (
    kind     text PRIMARY KEY,
    owed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP TABLE wake_owed;
