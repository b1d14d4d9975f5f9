package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Project variables are the vars context, as GitHub's configuration
// variables: not secret (members read them, and every run of the
// project, forks' included, gets them). A run keeps the values it was
// made with (runs.vars).

// Bounds of a project's variables, GitHub's: names as secrets' (upper
// case; vars.name reads VAR NAME whatever its case), 48 KiB a value, 100
// a project and 256 KiB together (every job's claim carries them).
const (
	MaxVariableBytes  = 48 << 10
	MaxVariables      = 100
	MaxVariablesBytes = 256 << 10
)

// setVariableSQL sets variable $2 of project $1 to $3, by $4, unless the
// project's variables would pass MaxVariables or MaxVariablesBytes
// (nothing returned then).
const setVariableSQL = `
WITH others AS (SELECT count(*) AS n, coalesce(sum(length(name) + octet_length(value)), 0) AS bytes
                FROM project_variables WHERE project_id = $1 AND name <> $2)
INSERT INTO project_variables (project_id, name, value, updated_by)
SELECT $1, $2, $3, $4 FROM others WHERE others.n < $5 AND others.bytes + length($2) + octet_length($3) <= $6
ON CONFLICT (project_id, name) DO UPDATE SET value = EXCLUDED.value, updated_by = EXCLUDED.updated_by, updated_at = now()
RETURNING name`

// lockVariablesSQL makes a project's variable changes take turns, so that
// two at once cannot both pass the bounds.
const lockVariablesSQL = `SELECT pg_advisory_xact_lock(7423, hashtext($1))`

// listVariablesSQL is a page of project $1's variables, after $2, at most $3.
const listVariablesSQL = `
SELECT name, value, updated_at, updated_by FROM project_variables WHERE project_id = $1 AND name > $2
ORDER BY name LIMIT $3`

// deleteVariableSQL deletes variable $2 of project $1.
const deleteVariableSQL = `DELETE FROM project_variables WHERE project_id = $1 AND name = $2`

// runVariablesSQL is project $1's variables as a run gets them.
const runVariablesSQL = `SELECT coalesce(jsonb_object_agg(name, value), '{}') FROM project_variables WHERE project_id = $1`

// Variable is a project variable.
type Variable struct {
	Name      string    `json:"name"`
	Value     string    `json:"value"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by"`
}

// SetVariable sets a project variable; u must be an admin of the project.
func (s *Store) SetVariable(ctx context.Context, u User, projectID, name, value string) error {
	switch {
	case !secretNameRE().MatchString(name):
		return domain.Errorf(domain.EInvalid, "variable names are upper-case letters, digits and _, not starting with a digit: %q", name)
	case strings.HasPrefix(name, "GITHUB_") || strings.HasPrefix(name, "FORGECI_"):
		return domain.Errorf(domain.EInvalid, "variable names may not start with GITHUB_ or FORGECI_: %q", name)
	case len(value) > MaxVariableBytes:
		return domain.Errorf(domain.EInvalid, "variable value too long: %d bytes, at most %d", len(value), MaxVariableBytes)
	case strings.IndexByte(value, 0) >= 0:
		return domain.Errorf(domain.EInvalid, "a variable's value is text: it holds a NUL byte")
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, projectID, RankAdmin, "project "+projectID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, lockVariablesSQL, projectID); err != nil {
			return fmt.Errorf("lock variables: %w", err)
		}
		var got string
		err := tx.QueryRow(ctx, setVariableSQL, projectID, name, value, "user:"+u.ID, MaxVariables, MaxVariablesBytes).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Errorf(domain.EInvalid, "a project has at most %d variables of %d bytes together: delete one first",
				MaxVariables, MaxVariablesBytes)
		}
		if err != nil {
			return fmt.Errorf("set variable: %w", err)
		}
		return nil
	})
}

// ListVariables lists a page of a project's variables, values included;
// u must be able to read the project (its runs get them anyway).
func (s *Store) ListVariables(ctx context.Context, u User, projectID string, pg Page) ([]Variable, string, error) {
	may := func(ctx context.Context, tx pgx.Tx) error {
		_, err := authorize(ctx, tx, u, projectID, RankRead, "project "+projectID)
		return err
	}
	return checkedPage(ctx, s, may, pg, "variables", listVariablesSQL, []any{projectID},
		func(row pgx.CollectableRow) (Variable, error) {
			var v Variable
			return v, row.Scan(&v.Name, &v.Value, &v.UpdatedAt, &v.UpdatedBy)
		},
		func(v Variable) string { return v.Name })
}

// DeleteVariable removes a project variable; u must be an admin of it.
func (s *Store) DeleteVariable(ctx context.Context, u User, projectID, name string) error {
	return s.adminDelete(ctx, u, projectID, "delete variable", deleteVariableSQL,
		domain.Errorf(domain.ENotFound, "variable %s not found", name), name)
}

// runVariables are project projectID's variables, for a new run to keep.
func runVariables(ctx context.Context, tx pgx.Tx, projectID string) (map[string]string, error) {
	vars := map[string]string{}
	if err := tx.QueryRow(ctx, runVariablesSQL, projectID).Scan(&vars); err != nil {
		return nil, fmt.Errorf("project variables: %w", err)
	}
	return vars, nil
}
