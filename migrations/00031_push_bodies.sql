-- +goose Up
-- The bodies of push deliveries, remembered (by their SHA-256) far longer
-- than the deliveries themselves (30 days): a push's signed body replayed
-- from a delivery log after its delivery was collected would otherwise
-- rebuild, with the secrets, a ref that has not moved since (a release
-- tag). A push GitHub took longer ago than they are remembered is refused
-- by its age (store.PushHorizon), and so is one older than the oldest
-- push delivery still recorded when this began (scm_push_memory): the
-- bodies of those before it may be forgotten already.
CREATE TABLE scm_push_bodies (
    repository_id bigint NOT NULL REFERENCES scm_repositories (github_id) ON DELETE CASCADE,
    body_sha256   bytea NOT NULL CHECK (length(body_sha256) = 32),
    received_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repository_id, body_sha256)
);
CREATE INDEX scm_push_bodies_received ON scm_push_bodies (received_at);
INSERT INTO scm_push_bodies (repository_id, body_sha256, received_at)
SELECT repository_id, body_sha256, received_at FROM scm_deliveries
WHERE event = 'push' AND body_sha256 IS NOT NULL
ON CONFLICT DO NOTHING;
CREATE TABLE scm_push_memory (started_at timestamptz NOT NULL);
-- An installation never connected to GitHub has forgotten nothing.
INSERT INTO scm_push_memory (started_at)
SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM scm_repositories) THEN '-infinity'
            ELSE coalesce(min(received_at), now()) END
FROM scm_deliveries WHERE event = 'push';

-- +goose Down
DROP TABLE scm_push_memory;
DROP TABLE scm_push_bodies;
