-- +goose Up
-- A project may make its status badges public: served without login
-- (README images are fetched without credentials). Off by default.
ALTER TABLE projects ADD COLUMN badges_public boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE projects DROP COLUMN badges_public;
