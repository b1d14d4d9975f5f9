-- +goose Up
-- A GitHub project's schedule belongs to the repository whose default
-- branch set it (a project may link several): its firing asks for a run
-- of that repository, a push to another repository's default branch
-- leaves it alone, and it goes with the repository (removed, or linked
-- to another project: FireSchedules deletes it then).
ALTER TABLE schedules ADD COLUMN repository_id bigint REFERENCES scm_repositories (github_id) ON DELETE CASCADE;
UPDATE schedules s SET repository_id = (
    SELECT r.github_id FROM scm_repositories r WHERE r.project_id = s.project_id
    ORDER BY r.created_at, r.github_id LIMIT 1)
WHERE s.template_run_id IS NULL;
DELETE FROM schedules WHERE template_run_id IS NULL AND repository_id IS NULL;
ALTER TABLE schedules ADD CONSTRAINT schedules_source CHECK ((template_run_id IS NULL) = (repository_id IS NOT NULL));

-- +goose Down
ALTER TABLE schedules DROP CONSTRAINT schedules_source;
ALTER TABLE schedules DROP COLUMN repository_id;
