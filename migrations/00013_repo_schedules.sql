-- +goose Up
-- A GitHub project's schedules follow its default branch's pipeline as
-- GitHub reports every push to it (whether or not the push makes a run):
-- such a schedule has no run to fire again; its firing asks the GitHub
-- worker to resolve ref (the default branch) as the App then.
ALTER TABLE schedules ALTER COLUMN template_run_id DROP NOT NULL;
ALTER TABLE schedules ADD COLUMN ref text;

-- +goose Down
DELETE FROM schedules WHERE template_run_id IS NULL;
ALTER TABLE schedules DROP COLUMN ref;
ALTER TABLE schedules ALTER COLUMN template_run_id SET NOT NULL;
