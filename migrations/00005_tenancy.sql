-- +goose Up
-- Ownership beyond the lease: projects with members, trust tiers on runs,
-- approval of first-time contributors, caches scoped by ref and trust,
-- blobs owned by (project, trust tier), and sealed project secrets.

-- Projects are created explicitly. next_run_number holds the last run
-- number used (0: none yet).
ALTER TABLE projects ALTER COLUMN next_run_number SET DEFAULT 0;
ALTER TABLE projects ADD COLUMN default_branch text NOT NULL DEFAULT 'main'
    CHECK (default_branch ~ '^[A-Za-z0-9._][A-Za-z0-9._/-]{0,199}$');

-- A repository names its project by ID; a registered repository whose
-- project had no run yet gets its project now.
INSERT INTO projects (id, name)
SELECT DISTINCT ON (r.project) gen_random_uuid()::text, r.project FROM scm_repositories r
WHERE NOT EXISTS (SELECT 1 FROM projects p WHERE p.name = r.project);
ALTER TABLE scm_repositories ADD COLUMN project_id text REFERENCES projects (id);
UPDATE scm_repositories r SET project_id = p.id FROM projects p WHERE p.name = r.project;
ALTER TABLE scm_repositories ALTER COLUMN project_id SET NOT NULL;
ALTER TABLE scm_repositories DROP COLUMN project;

-- Roles are per project; a user's global role is admin (everything) or
-- user (only what memberships give).
CREATE TABLE project_members (
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       text NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    -- Runs this member starts get the project's secrets (trusted tier).
    secrets    boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX project_members_user ON project_members (user_id);

-- Existing users keep what they could do, now per project; the secrets
-- permission only for global admins, so a writer's run stops getting them.
INSERT INTO project_members (project_id, user_id, role, secrets)
SELECT p.id, u.id, u.role, u.role = 'admin' FROM projects p CROSS JOIN users u;
ALTER TABLE users DROP CONSTRAINT users_role_check;
UPDATE users SET role = 'user' WHERE role <> 'admin';
ALTER TABLE users ADD CONSTRAINT users_role_check CHECK (role IN ('admin', 'user'));

-- The one definition of a user's rank on a project: 3 admin, 2 write,
-- 1 read, 0 nothing (also for unknown or disabled users).
-- +goose StatementBegin
CREATE FUNCTION project_rank(uid text, pid text) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((
        SELECT CASE WHEN u.role = 'admin' THEN 3
                    ELSE coalesce((SELECT CASE m.role WHEN 'admin' THEN 3 WHEN 'write' THEN 2 ELSE 1 END
                                   FROM project_members m WHERE m.project_id = pid AND m.user_id = uid), 0)
               END
        FROM users u WHERE u.id = uid AND u.disabled_at IS NULL), 0)
$$;
-- +goose StatementEnd

-- Trust tiers. A trusted run gets secrets and writes caches trusted runs
-- read. scope is the ref whose caches the run reads first and the only
-- one it writes (refs/heads/main, refs/pull/7/head, cli/<user>); base_ref
-- is a pull request's base branch. actor is whom the run is for
-- (user:<id>, github:<id>); an untrusted run of an actor without an
-- approval in the project waits (approval 'pending') until a writer
-- approves or rejects it.
ALTER TABLE runs ADD COLUMN trusted boolean;
UPDATE runs SET trusted = secrets_allowed;
ALTER TABLE runs ALTER COLUMN trusted SET NOT NULL;
ALTER TABLE runs ALTER COLUMN trusted SET DEFAULT false;
ALTER TABLE runs DROP COLUMN secrets_allowed;
ALTER TABLE runs ADD COLUMN scope text;
UPDATE runs SET scope = coalesce(git_ref, 'legacy');
ALTER TABLE runs ALTER COLUMN scope SET NOT NULL;
ALTER TABLE runs ALTER COLUMN scope SET DEFAULT 'manual';
ALTER TABLE runs ADD CONSTRAINT runs_scope_check CHECK (length(scope) BETWEEN 1 AND 300);
ALTER TABLE runs ADD COLUMN base_ref text CHECK (base_ref IS NULL OR length(base_ref) BETWEEN 1 AND 300);
ALTER TABLE runs ADD COLUMN actor text NOT NULL DEFAULT '' CHECK (length(actor) <= 200);
ALTER TABLE runs ADD COLUMN approval text NOT NULL DEFAULT 'none'
    CHECK (approval IN ('none', 'pending', 'approved', 'rejected'));
ALTER TABLE runs ADD COLUMN approval_by text;
ALTER TABLE runs ADD COLUMN approval_at timestamptz;
ALTER TABLE runs ADD CONSTRAINT runs_approval_decided
    CHECK ((approval IN ('approved', 'rejected')) = (approval_at IS NOT NULL));
CREATE INDEX runs_project_created ON runs (project_id, created_at DESC, id DESC);

-- Actors a writer approved in a project: their later untrusted runs start
-- at once. Kept apart from runs, so that it outlives them.
CREATE TABLE approved_actors (
    project_id  text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    actor       text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    approved_by text NOT NULL,
    approved_at timestamptz NOT NULL DEFAULT now(),
    run_id      text,
    PRIMARY KEY (project_id, actor)
);

-- A delivery's body is its identity as much as its GUID: the GUID is an
-- unsigned header, so a captured body posted again under a new GUID must
-- still be a redelivery.
ALTER TABLE scm_deliveries ADD COLUMN body_sha256 bytea CHECK (body_sha256 IS NULL OR length(body_sha256) = 32);
CREATE UNIQUE INDEX scm_deliveries_body ON scm_deliveries (repository_id, body_sha256);

-- A reason change (waiting for approval, rejected) is news for the
-- job's check run as much as a state change.
DROP TRIGGER jobs_check_runs ON jobs;
CREATE TRIGGER jobs_check_runs AFTER UPDATE OF state, reason ON jobs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.reason IS DISTINCT FROM NEW.reason)
    EXECUTE FUNCTION check_runs_bump();

-- Blobs belong to a project and a trust tier: a digest alone grants
-- nothing. s3_key is where the bytes are (p/<project>/<tier>/sha256/<hex>
-- for new blobs; the old global sha256/<hex> for blobs that existed
-- before, registered for every (project, tier) that referenced them).
ALTER TABLE blobs RENAME TO legacy_blobs;
CREATE TABLE blobs (
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    trusted    boolean NOT NULL,
    digest     text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    size       bigint NOT NULL CHECK (size >= 0),
    s3_key     text NOT NULL CHECK (s3_key ~ 'sha256/[0-9a-f]{64}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, trusted, digest)
);
ALTER TABLE artifacts ADD COLUMN project_id text;
ALTER TABLE artifacts ADD COLUMN trusted boolean;
UPDATE artifacts a SET project_id = r.project_id, trusted = r.trusted
FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id = a.job_id;
ALTER TABLE artifacts ALTER COLUMN project_id SET NOT NULL;
ALTER TABLE artifacts ALTER COLUMN trusted SET NOT NULL;
INSERT INTO blobs (project_id, trusted, digest, size, s3_key)
SELECT r.project_id, r.trusted, b.digest, b.size, 'sha256/' || substr(b.digest, 8)
FROM runs r JOIN legacy_blobs b ON b.digest = r.source_digest
UNION
SELECT a.project_id, a.trusted, b.digest, b.size, 'sha256/' || substr(b.digest, 8)
FROM artifacts a JOIN legacy_blobs b ON b.digest = a.digest;
ALTER TABLE runs DROP CONSTRAINT runs_source_digest_fkey;
ALTER TABLE runs ADD CONSTRAINT runs_source_fkey FOREIGN KEY (project_id, trusted, source_digest)
    REFERENCES blobs (project_id, trusted, digest);
ALTER TABLE artifacts DROP CONSTRAINT artifacts_digest_fkey;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_blob_fkey FOREIGN KEY (project_id, trusted, digest)
    REFERENCES blobs (project_id, trusted, digest);

-- Caches are scoped by (project, ref, trust). The entries made before this
-- were scoped by project only, so a fork's could be restored by the main
-- branch: their provenance cannot be told, and caches are only a speed-up,
-- so they go.
DROP TABLE pending_caches;
DROP TABLE caches;
DROP TABLE legacy_blobs;
CREATE TABLE caches (
    project_id   text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    scope        text NOT NULL CHECK (length(scope) BETWEEN 1 AND 300),
    trusted      boolean NOT NULL,
    key          text NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
    digest       text NOT NULL,
    size         bigint NOT NULL CHECK (size >= 0),
    job_id       text REFERENCES jobs (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, scope, trusted, key),
    FOREIGN KEY (project_id, trusted, digest) REFERENCES blobs (project_id, trusted, digest)
);
CREATE INDEX caches_prefix ON caches (project_id, scope, trusted, key text_pattern_ops, created_at DESC);
CREATE TABLE pending_caches (
    job_id     text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    generation integer NOT NULL,
    key        text NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
    project_id text NOT NULL,
    trusted    boolean NOT NULL,
    digest     text NOT NULL,
    size       bigint NOT NULL CHECK (size >= 0),
    PRIMARY KEY (job_id, generation, key),
    FOREIGN KEY (project_id, trusted, digest) REFERENCES blobs (project_id, trusted, digest)
);

-- Secrets are sealed (AES-256-GCM) under a per-project data key, which is
-- stored only wrapped by the master key (KMS, or a local key file).
-- value is kept only until `forgeci migrate` seals the rows of
-- installations that had plain-text secrets.
CREATE TABLE project_keys (
    project_id  text PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    wrapped_key bytea NOT NULL,
    master_key  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE project_secrets ALTER COLUMN value DROP NOT NULL;
ALTER TABLE project_secrets ADD COLUMN sealed bytea;
ALTER TABLE project_secrets ADD CONSTRAINT project_secrets_one_form CHECK ((value IS NULL) <> (sealed IS NULL));
-- Jobs name the secrets they use; a claim carries only those.
ALTER TABLE jobs ADD COLUMN secret_names text[] NOT NULL DEFAULT '{}';

-- +goose Down
-- Secrets sealed and caches dropped cannot be put back: restore a backup.
-- +goose StatementBegin
DO $$ BEGIN RAISE EXCEPTION 'migration 00005 (tenancy) cannot be undone: restore a backup'; END $$;
-- +goose StatementEnd
