-- The chaos harness's witness inside the database: triggers that record
-- every job transition, lease extension and runner write, and judge each
-- write against the job row as it stands in the writing transaction. They
-- live only in the chaos database (never in migrations). The checker reads
-- chaos_audit afterwards.
CREATE TABLE chaos_audit (
    seq         bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind        text NOT NULL,       -- job | chunk | artifact | pending_cache | cache | attempt
    job_id      text,
    generation  integer,
    old_state   text,
    new_state   text,
    lease_id    text,
    runner_id   text,
    expires     timestamptz,         -- the lease's expiry after this change
    ok          boolean NOT NULL,    -- the write was made under the job's current, unexpired lease
    detail      text
);

-- Job transitions: claims (generation up), lease extensions, state changes.
CREATE FUNCTION chaos_audit_job() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ok boolean := true;
    why text := '';
BEGIN
    IF OLD.state IS NOT DISTINCT FROM NEW.state AND OLD.generation = NEW.generation
       AND OLD.lease_expires_at IS NOT DISTINCT FROM NEW.lease_expires_at THEN
        RETURN NULL;
    END IF;
    IF NEW.generation <> OLD.generation THEN
        -- A claim: only of a QUEUED job, by exactly one generation.
        ok := OLD.state = 'QUEUED' AND NEW.state = 'RUNNING' AND NEW.generation = OLD.generation + 1;
        why := 'claim';
    ELSIF OLD.state = 'RUNNING' AND NEW.state = 'RUNNING' THEN
        -- An extension: only of a lease that had not expired, only later.
        ok := OLD.lease_expires_at > now() AND NEW.lease_expires_at >= OLD.lease_expires_at;
        why := 'extend';
        IF NOT ok THEN
            -- Which condition failed, for the report.
            why := format('extend: expiry was %s, now() %s, made %s', OLD.lease_expires_at, now(), NEW.lease_expires_at);
        END IF;
    ELSIF OLD.state IN ('PASSED', 'FAILED', 'CANCELED', 'ABORTED', 'SKIPPED') THEN
        ok := false;
        why := 'left a terminal state';
    END IF;
    INSERT INTO chaos_audit (kind, job_id, generation, old_state, new_state, lease_id, runner_id, expires, ok, detail)
    VALUES ('job', NEW.id, NEW.generation, OLD.state, NEW.state, NEW.lease_id::text, NEW.runner_id,
            NEW.lease_expires_at, ok, why);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit_job AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION chaos_audit_job();

-- Writes that belong to one attempt: log chunks, artifacts, staged caches.
-- Made under the lease means: the job row, as this transaction sees it
-- after the lease check locked it, is RUNNING at this generation and its
-- lease has not expired by the database clock.
CREATE FUNCTION chaos_audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    j record;
    ok boolean;
    detail text := to_jsonb(NEW)->>'name';
BEGIN
    IF TG_ARGV[0] = 'chunk' THEN
        detail := (to_jsonb(NEW)->>'start_offset') || '+' || (length(to_jsonb(NEW)->>'data') / 2 - 1)::text;
    ELSIF TG_ARGV[0] = 'pending_cache' THEN
        detail := to_jsonb(NEW)->>'key';
    END IF;
    SELECT state, generation, lease_id::text AS lease_id, runner_id, lease_expires_at INTO j
    FROM jobs WHERE id = NEW.job_id;
    ok := j.state = 'RUNNING' AND j.generation = NEW.generation AND j.lease_expires_at > now();
    INSERT INTO chaos_audit (kind, job_id, generation, new_state, lease_id, runner_id, expires, ok, detail)
    VALUES (TG_ARGV[0], NEW.job_id, NEW.generation, j.state, j.lease_id, j.runner_id, j.lease_expires_at, ok, detail);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit_chunk AFTER INSERT ON log_chunks FOR EACH ROW EXECUTE FUNCTION chaos_audit_write('chunk');
CREATE TRIGGER chaos_audit_artifact AFTER INSERT OR UPDATE ON artifacts FOR EACH ROW EXECUTE FUNCTION chaos_audit_write('artifact');
CREATE TRIGGER chaos_audit_pending AFTER INSERT OR UPDATE ON pending_caches FOR EACH ROW EXECUTE FUNCTION chaos_audit_write('pending_cache');

-- An attempt ends: by a runner's completion (lease current and unexpired)
-- or by the sweeper (ABORTED, and only once the lease has expired).
CREATE FUNCTION chaos_audit_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    j record;
    ok boolean;
BEGIN
    SELECT state, generation, lease_id::text AS lease_id, runner_id, lease_expires_at INTO j
    FROM jobs WHERE id = NEW.job_id;
    ok := j.state = 'RUNNING' AND j.generation = NEW.generation AND j.lease_id = NEW.lease_id::text
          AND (NEW.outcome = 'ABORTED') = (j.lease_expires_at <= now());
    INSERT INTO chaos_audit (kind, job_id, generation, new_state, lease_id, runner_id, expires, ok, detail)
    VALUES ('attempt', NEW.job_id, NEW.generation, NEW.outcome, NEW.lease_id::text, NEW.runner_id,
            j.lease_expires_at, ok, coalesce(NEW.reason, ''));
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit_attempt AFTER INSERT ON job_attempts FOR EACH ROW EXECUTE FUNCTION chaos_audit_attempt();

-- A cache becomes visible: only from an attempt that is passing right now.
CREATE FUNCTION chaos_audit_cache() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a record;
BEGIN
    SELECT outcome, generation INTO a FROM job_attempts
    WHERE job_id = NEW.job_id ORDER BY generation DESC LIMIT 1;
    INSERT INTO chaos_audit (kind, job_id, generation, new_state, ok, detail)
    VALUES ('cache', NEW.job_id, a.generation, a.outcome, coalesce(a.outcome = 'PASSED', false), NEW.key);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit_cache AFTER INSERT ON caches FOR EACH ROW EXECUTE FUNCTION chaos_audit_cache();
