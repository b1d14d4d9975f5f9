-- +goose Up
-- A runner may take untrusted work only (pull requests from forks, runs of
-- members without the secrets permission), never trusted work: a
-- long-lived runner whose slots run both may carry what an untrusted job
-- left to a trusted job with secrets. untrusted_only implies untrusted.
ALTER TABLE registration_tokens ADD COLUMN untrusted_only boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT registration_tokens_untrusted_only CHECK (untrusted OR NOT untrusted_only);
ALTER TABLE runners ADD COLUMN untrusted_only boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT runners_untrusted_only CHECK (untrusted OR NOT untrusted_only);

-- +goose Down
-- Without the column these would take trusted work too: revoked, and
-- unused tokens expired, rather than widened. Their idle polls may still
-- be answered 204 from a verdict (package wake) for up to 24 hours
-- (delete hints/runners/ in the bucket to end that at once); they never
-- get a job, which a claim checks in PostgreSQL.
UPDATE runners SET revoked_at = coalesce(revoked_at, now()) WHERE untrusted_only;
UPDATE registration_tokens SET expires_at = least(expires_at, now()) WHERE untrusted_only AND used_at IS NULL;
ALTER TABLE runners DROP COLUMN untrusted_only;
ALTER TABLE registration_tokens DROP COLUMN untrusted_only;
