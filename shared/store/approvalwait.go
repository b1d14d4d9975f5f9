package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A fork's pull request whose author is not yet approved costs the GitHub
// worker a download, a snapshot and a run with its jobs and check runs at
// every event. So that a stranger cannot multiply that cost, another
// event at a commit that already waits makes nothing (WaitingForApproval),
// and a newer commit's waiting run rejects the older ones of the same
// pull request (supersedeWaiting): a pull request holds at most one run
// waiting for approval, its newest commit's.

// ofRepositorySQL is the condition that run r is of GitHub repository $4:
// its check runs' (a waiting run's first job has one), or, for a run with
// none (a fork's run of a commit a trusted run built: trustedSpeaks), the
// delivery's that made it.
const ofRepositorySQL = `(EXISTS (SELECT 1 FROM jobs j JOIN check_runs c ON c.job_id = j.id WHERE j.run_id = r.id AND c.repository_id = $4)
  OR EXISTS (SELECT 1 FROM scm_deliveries d WHERE d.run_id = r.id AND d.repository_id = $4))`

// waitingRunSQL finds a run of project $1's ref $2 at commit $3 of
// GitHub repository $4 that waits for approval, its actor $5 not approved
// since. Two repositories of one project share pull request refs.
const waitingRunSQL = `
SELECT r.id FROM runs r
WHERE r.project_id = $1 AND r.git_ref = $2 AND r.git_sha = $3 AND r.approval = 'pending' AND r.finished_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM approved_actors a WHERE a.project_id = $1 AND a.actor = $5)
  AND ` + ofRepositorySQL + `
LIMIT 1`

// supersedeWaitingSQL locks project $1's runs of ref $2 of repository $4,
// other than $3, that still wait for approval.
const supersedeWaitingSQL = `
SELECT r.id FROM runs r
WHERE r.project_id = $1 AND r.git_ref = $2 AND r.id <> $3 AND r.approval = 'pending' AND r.finished_at IS NULL
  AND ` + ofRepositorySQL + `
ORDER BY r.id FOR UPDATE OF r`

// newRunWaitsSQL reads whether run $1 still waits for approval once made:
// its concurrency group may have canceled it at once (a later event's run
// was there first), and then it supersedes nothing.
const newRunWaitsSQL = `SELECT approval = 'pending' AND finished_at IS NULL FROM runs WHERE id = $1`

// supersededBy is who the rejection of a superseded run names.
const supersededBy = "ForgeCI: superseded by a newer commit of the pull request"

// WaitingForApproval returns the run of project projectID's ref at commit
// sha of GitHub repository repositoryID that already waits for approval,
// while actor is still not approved ("" when there is none).
func (s *Store) WaitingForApproval(ctx context.Context, projectID string, repositoryID int64, gitRef, sha, actor string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, waitingRunSQL, projectID, gitRef, sha, repositoryID, actor).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("runs waiting for approval: %w", err)
	}
	return id, nil
}

// supersedeWaiting rejects, when run is a pull request's of a GitHub
// repository and waits for approval, the other runs of its ref and
// repository that still wait, and notes them in run.canceled
// (afterCreate settles their groups). Two deliveries of one pull request
// taken at once cannot both miss the other's run: numbering a run locks
// its project's row (numberRunSQL) until the commit, so the second's run
// is made after the first's commit, and this, a later statement, sees it.
func supersedeWaiting(ctx context.Context, tx pgx.Tx, run *Run, checks *CheckTarget) error {
	if checks == nil || run.Approval != ApprovalPending || !strings.HasPrefix(run.GitRef, "refs/pull/") {
		return nil
	}
	var waits bool
	if err := tx.QueryRow(ctx, newRunWaitsSQL, run.ID).Scan(&waits); err != nil || !waits {
		return err
	}
	ids, err := decideEach(ctx, tx, supersedeWaitingSQL, []any{run.ProjectID, run.GitRef, run.ID, checks.RepositoryID},
		"", "", ApprovalRejected, supersededBy)
	run.canceled = append(run.canceled, ids...)
	return err
}
