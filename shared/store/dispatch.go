package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// latestSnapshotSQL is the newest run of project $1 on ref $2 in tier $3
// that has a source snapshot.
const latestSnapshotSQL = `SELECT ` + runColumns + `
FROM runs r JOIN projects p ON p.id = r.project_id
WHERE r.project_id = $1 AND r.git_ref = $2 AND r.trusted = $3 AND r.source_digest IS NOT NULL
ORDER BY r.number DESC LIMIT 1`

// projectOnGitHubSQL reports whether project $1 has a GitHub repository.
const projectOnGitHubSQL = `SELECT EXISTS (SELECT 1 FROM scm_repositories WHERE project_id = $1)`

// LatestSnapshot is the newest run of ref in the project that has a
// source snapshot in the given tier: what a manual run of a project fed
// by forgeci submit runs again. A GitHub project's manual runs resolve the
// ref through GitHub instead, which ForgeCI does not do yet.
func (s *Store) LatestSnapshot(ctx context.Context, projectID, ref string, trusted bool) (Run, error) {
	var onGitHub bool
	if err := s.pool.QueryRow(ctx, projectOnGitHubSQL, projectID).Scan(&onGitHub); err != nil {
		return Run{}, fmt.Errorf("project repository: %w", err)
	}
	if onGitHub {
		return Run{}, domain.Errorf(domain.EConflict, "this project's runs come from GitHub: running it by hand (resolving %s through GitHub) is not supported yet", ref)
	}
	run, err := scanRun(s.pool.QueryRow(ctx, latestSnapshotSQL, projectID, ref, trusted))
	if errors.Is(err, pgx.ErrNoRows) {
		tier := map[bool]string{true: "trusted", false: "untrusted"}[trusted]
		return Run{}, domain.Errorf(domain.ENotFound, "no snapshot of %s was submitted to this project in your tier (%s): submit one from that branch first (forgeci submit)", ref, tier)
	}
	return run, err
}
