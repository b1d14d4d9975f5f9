package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// badgeSQL reads project $1 (an ID, or else a name), whether user $2 ("":
// nobody) may read it or its badges are public, and the state of the
// trusted run of branch $3 (the default branch when empty) that ended
// last (runs_ref_ended's order): an untrusted one says nothing of the
// branch (migration 00028).
const badgeSQL = `
SELECT p.badges_public OR ($2 <> '' AND project_rank($2, p.id) >= 1),
       coalesce((SELECT r.state FROM runs r
                 WHERE r.project_id = p.id AND r.git_ref = 'refs/heads/' || coalesce(nullif($3, ''), p.default_branch)
                   AND r.trusted AND r.state IN ('PASSED', 'FAILED', 'CANCELED', 'ABORTED')
                 ORDER BY r.finished_at DESC, r.id DESC LIMIT 1), '')
FROM projects p WHERE p.id = $1 OR p.name = $1
ORDER BY p.id = $1 DESC LIMIT 1`

// Badge returns the state of the newest ended trusted run of a project's branch
// (the default branch when "") for its status badge, "" when none has
// ended. u is nil for a caller without login: only a project whose
// badges are public answers it; any other is ENotFound, as a project u
// may not read is.
func (s *Store) Badge(ctx context.Context, u *User, project, branch string) (string, error) {
	if branch != "" && !domain.ValidBranch(branch) {
		return "", domain.Errorf(domain.EInvalid, "branch %q is not a branch name", branch)
	}
	userID := ""
	if u != nil {
		userID = u.ID
	}
	var may bool
	var state string
	err := s.pool.QueryRow(ctx, badgeSQL, project, userID, branch).Scan(&may, &state)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !may {
		return "", domain.Errorf(domain.ENotFound, "project %s not found (or its badges are not public)", project)
	}
	if err != nil {
		return "", fmt.Errorf("badge: %w", err)
	}
	return state, nil
}
