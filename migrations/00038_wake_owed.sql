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
-- Notes still owed would be forgotten: run a scheduled pass first.
LOCK TABLE wake_owed IN ACCESS EXCLUSIVE MODE;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM wake_owed) THEN
        RAISE EXCEPTION 'wake-up notes are still owed (table wake_owed): invoke the sweeper once S3 takes writes, then migrate down';
    END IF;
END $$;
-- +goose StatementEnd
DROP TABLE wake_owed;
