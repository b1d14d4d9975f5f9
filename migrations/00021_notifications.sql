-- +goose Up
-- Notifications (docs/projects.md): a project's hooks, and an outbox row
-- per (hook, run, event) written by the transaction that ends the run
-- (the trigger below), so no run's end is lost and none notified twice
-- by the outbox itself. A delivery is leased like a check run; a lost
-- answer makes it retried, and receivers dedupe by its ID.
CREATE TABLE notify_hooks (
    id         text PRIMARY KEY,
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url        text NOT NULL,
    format     text NOT NULL CHECK (format IN ('json', 'slack')),
    events     text[] NOT NULL,
    secret     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notify_hooks_project ON notify_hooks (project_id);

CREATE TABLE notifications (
    id               bigserial PRIMARY KEY,
    hook_id          text NOT NULL REFERENCES notify_hooks (id) ON DELETE CASCADE,
    project_id       text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    run_id           text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    event            text NOT NULL CHECK (event IN ('run_ended', 'branch_failed', 'branch_recovered')),
    state            text NOT NULL DEFAULT 'PENDING' CHECK (state IN ('PENDING', 'DELIVERED', 'FAILED')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_id         uuid,
    lease_expires_at timestamptz,
    last_status      integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (hook_id, run_id, event)
);
CREATE INDEX notifications_due ON notifications (next_attempt_at) WHERE state = 'PENDING';
CREATE INDEX notifications_project ON notifications (project_id, id);

-- The previous ended run of a ref, for branch_failed and
-- branch_recovered (and the badges' newest ended run of a branch).
CREATE INDEX runs_ref_ended ON runs (project_id, git_ref, finished_at DESC) WHERE finished_at IS NOT NULL;

-- A run that ends notifies its project's hooks of run_ended and, for a
-- branch (refs/heads/...), of branch_failed when it fails (or aborts)
-- after the branch's previous ended run passed (or none had ended), and
-- branch_recovered when it passes after one failed. Two runs of a branch
-- ending in the same instant do not see each other (making them take
-- turns would mean waiting for a lock while holding run rows, which could
-- close a cycle with a concurrency group's cancel): both may say
-- branch_failed. A notification must never fail a run's end: anything
-- that goes wrong here is a warning in the database's log, and the run
-- ends without it.
-- +goose StatementBegin
CREATE FUNCTION forgeci_notify_run_end() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prev text;
    evs text[] := ARRAY['run_ended'];
BEGIN
    IF NEW.state NOT IN ('PASSED', 'FAILED', 'CANCELED', 'ABORTED') OR OLD.state IN ('PASSED', 'FAILED', 'CANCELED', 'ABORTED') THEN
        RETURN NEW;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM notify_hooks WHERE project_id = NEW.project_id) THEN
        RETURN NEW;
    END IF;
    BEGIN
        IF NEW.git_ref LIKE 'refs/heads/%' AND NEW.state <> 'CANCELED' THEN
            SELECT r.state INTO prev FROM runs r
            WHERE r.project_id = NEW.project_id AND r.git_ref = NEW.git_ref AND r.id <> NEW.id
              AND r.state IN ('PASSED', 'FAILED', 'ABORTED') AND r.finished_at IS NOT NULL
            ORDER BY r.finished_at DESC, r.id DESC LIMIT 1;
            IF NEW.state IN ('FAILED', 'ABORTED') AND (prev IS NULL OR prev = 'PASSED') THEN
                evs := evs || 'branch_failed'::text;
            ELSIF NEW.state = 'PASSED' AND prev IN ('FAILED', 'ABORTED') THEN
                evs := evs || 'branch_recovered'::text;
            END IF;
        END IF;
        INSERT INTO notifications (hook_id, project_id, run_id, event)
        SELECT h.id, h.project_id, NEW.id, e FROM notify_hooks h, unnest(evs) AS e
        WHERE h.project_id = NEW.project_id AND e = ANY (h.events)
        ON CONFLICT DO NOTHING;
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'forgeci: notifications of run % not recorded: %', NEW.id, SQLERRM;
    END;
    RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER runs_notify AFTER UPDATE OF state ON runs FOR EACH ROW EXECUTE FUNCTION forgeci_notify_run_end();

-- +goose Down
DROP TRIGGER runs_notify ON runs;
DROP INDEX runs_ref_ended;
DROP FUNCTION forgeci_notify_run_end();
DROP TABLE notifications;
DROP TABLE notify_hooks;
