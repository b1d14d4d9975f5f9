-- +goose Up
-- The run's name as the pipeline's run-name made it when the run was
-- made (NULL: none; pages show the workflow's name then), and run-name
-- itself, which a schedule's firing evaluates again with its own facts.
ALTER TABLE runs ADD COLUMN run_name text, ADD COLUMN run_name_spec text;

-- +goose Down
ALTER TABLE runs DROP COLUMN run_name, DROP COLUMN run_name_spec;
