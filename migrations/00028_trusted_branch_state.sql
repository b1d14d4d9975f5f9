-- +goose Up
-- A branch's state (branch_failed and branch_recovered, the status badge,
-- the pass-rate chart) is that of its trusted runs only. An untrusted run
-- of a branch (a member without the secrets permission dispatching it, or
-- submitting a checkout that says it is on it) runs without secrets and
-- with code the branch may not hold: it must not page everyone with
-- "main failed", turn the badge red, or hide a real failure by passing.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION forgeci_notify_run_end() RETURNS trigger LANGUAGE plpgsql AS $$
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
        IF NEW.git_ref LIKE 'refs/heads/%' AND NEW.trusted AND NEW.state <> 'CANCELED' THEN
            SELECT r.state INTO prev FROM runs r
            WHERE r.project_id = NEW.project_id AND r.git_ref = NEW.git_ref AND r.id <> NEW.id AND r.trusted
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION forgeci_notify_run_end() RETURNS trigger LANGUAGE plpgsql AS $$
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
