-- +goose Up
-- The ForgeCI schema. Job and run states are CHECKed here so that no code
-- path, however buggy, can write a state the protocol does not know.

CREATE TABLE projects (
    id         text PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$'),
    next_run_number bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Runners authenticate with a random bearer token; only its SHA-256 is stored.
CREATE TABLE runners (
    id           text PRIMARY KEY,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    labels       text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz,
    revoked_at   timestamptz
);

-- One-time registration tokens made by an admin. used_at is set in the same
-- transaction that creates the runner, so a token registers at most one runner.
CREATE TABLE registration_tokens (
    id             text PRIMARY KEY,
    token_hash     bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    description    text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz,
    used_by_runner text REFERENCES runners (id),
    CHECK ((used_at IS NULL) = (used_by_runner IS NULL))
);

-- Content-addressed blobs in S3 (key sha256/<hex>). A row exists only after
-- the control plane verified the object's size and digest.
CREATE TABLE blobs (
    digest      text PRIMARY KEY CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    size        bigint NOT NULL CHECK (size >= 0),
    verified_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runs (
    id               text PRIMARY KEY,
    project_id       text NOT NULL REFERENCES projects (id),
    number           bigint NOT NULL,
    state            text NOT NULL DEFAULT 'PENDING'
                     CHECK (state IN ('PENDING', 'RUNNING', 'PASSED', 'FAILED', 'CANCELED', 'ABORTED')),
    trigger          text NOT NULL DEFAULT 'manual',
    -- What the user said they ran (git) is recorded apart from what was run (digests).
    git_sha          text,
    git_ref          text,
    git_dirty        boolean NOT NULL DEFAULT false,
    source_digest    text REFERENCES blobs (digest)
                     CHECK (source_digest IS NULL OR source_digest ~ '^sha256:[0-9a-f]{64}$'),
    manifest_digest  text CHECK (manifest_digest IS NULL OR manifest_digest ~ '^sha256:[0-9a-f]{64}$'),
    source_size      bigint CHECK (source_size IS NULL OR source_size >= 0),
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    UNIQUE (project_id, number),
    CHECK ((state IN ('PASSED', 'FAILED', 'CANCELED', 'ABORTED')) = (finished_at IS NOT NULL))
);

CREATE TABLE jobs (
    id               text PRIMARY KEY,
    run_id           text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    state            text NOT NULL
                     CHECK (state IN ('PENDING', 'QUEUED', 'RUNNING', 'PASSED', 'FAILED', 'CANCELED', 'ABORTED', 'SKIPPED')),
    needs            text[] NOT NULL DEFAULT '{}',
    labels           text[] NOT NULL DEFAULT '{}',
    spec             jsonb NOT NULL DEFAULT '{}',
    timeout_seconds  integer NOT NULL DEFAULT 3600 CHECK (timeout_seconds > 0),
    -- Explicit retry policy: how many extra attempts each kind of loss buys.
    retry_lease_lost integer NOT NULL DEFAULT 0 CHECK (retry_lease_lost BETWEEN 0 AND 10),
    retry_failed     integer NOT NULL DEFAULT 0 CHECK (retry_failed BETWEEN 0 AND 10),
    -- The current lease. generation increases by one at every claim and is
    -- never reset; the lease columns stay after the job ends so a late call
    -- from the last owner is told job_finished rather than lease_mismatch.
    runner_id        text REFERENCES runners (id),
    lease_id         uuid,
    generation       integer NOT NULL DEFAULT 0 CHECK (generation >= 0),
    lease_expires_at timestamptz,
    cancel_requested boolean NOT NULL DEFAULT false,
    log_size         bigint NOT NULL DEFAULT 0 CHECK (log_size >= 0),
    exit_code        integer,
    reason           text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    queued_at        timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    UNIQUE (run_id, name),
    CHECK (state <> 'RUNNING' OR (runner_id IS NOT NULL AND lease_id IS NOT NULL
                                  AND lease_expires_at IS NOT NULL AND generation > 0)),
    CHECK (state <> 'QUEUED' OR queued_at IS NOT NULL),
    CHECK ((state IN ('PASSED', 'FAILED', 'CANCELED', 'ABORTED', 'SKIPPED')) = (finished_at IS NOT NULL))
);

-- The claim scans only queued jobs, oldest first.
CREATE INDEX jobs_queued ON jobs (queued_at, id) WHERE state = 'QUEUED';
-- The sweeper scans only running jobs by expiry.
CREATE INDEX jobs_running_expiry ON jobs (lease_expires_at) WHERE state = 'RUNNING';
CREATE INDEX jobs_run ON jobs (run_id);

-- One row per lease that has ended: who held which generation, and how it
-- ended. The lease in force lives on the job row; this row is written in the
-- transaction that ends it. No foreign keys: rows are written only under the
-- job's row lock, and FK checks would lock the runner's row in every call.
CREATE TABLE job_attempts (
    job_id     text NOT NULL,
    generation integer NOT NULL CHECK (generation > 0),
    runner_id  text NOT NULL,
    lease_id   uuid NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL,
    outcome    text NOT NULL CHECK (outcome IN ('PASSED', 'FAILED', 'CANCELED', 'ABORTED')),
    reason     text,
    exit_code  integer,
    log_size   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, generation)
);

-- A job's log is per attempt: bytes from generation 1 never mix with those of
-- generation 2. Chunks are contiguous: start_offset of one is the end of the last.
CREATE TABLE log_chunks (
    job_id       text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    generation   integer NOT NULL,
    start_offset bigint NOT NULL CHECK (start_offset >= 0),
    data         bytea NOT NULL CHECK (length(data) > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, generation, start_offset)
);

-- Artifacts a job committed, by name, pointing at a verified blob.
CREATE TABLE artifacts (
    job_id     text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    generation integer NOT NULL,
    name       text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    digest     text NOT NULL REFERENCES blobs (digest),
    size       bigint NOT NULL CHECK (size >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Per generation: a retried job uploads its own artifacts; dependants
    -- read those of the generation that passed.
    PRIMARY KEY (job_id, generation, name)
);

-- Cache entries are per project and key; written only by a passing job's lease.
CREATE TABLE caches (
    project_id  text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    key         text NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
    digest      text NOT NULL REFERENCES blobs (digest),
    size        bigint NOT NULL CHECK (size >= 0),
    job_id      text REFERENCES jobs (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, key)
);
CREATE INDEX caches_prefix ON caches (project_id, key text_pattern_ops, created_at DESC);

-- Cache saves wait here until the job passes; then they become caches rows.
CREATE TABLE pending_caches (
    job_id     text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    generation integer NOT NULL,
    key        text NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
    digest     text NOT NULL REFERENCES blobs (digest),
    size       bigint NOT NULL CHECK (size >= 0),
    PRIMARY KEY (job_id, generation, key)
);

-- +goose Down
DROP TABLE pending_caches;
DROP TABLE caches;
DROP TABLE artifacts;
DROP TABLE log_chunks;
DROP TABLE job_attempts;
DROP TABLE jobs;
DROP TABLE runs;
DROP TABLE blobs;
DROP TABLE registration_tokens;
DROP TABLE runners;
DROP TABLE projects;
