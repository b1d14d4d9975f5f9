package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Trends: a job's duration over its last runs, and each branch's runs'
// outcomes, for the dashboard's charts.

// jobHistorySQL reads the last $3 ended jobs named $2 in the project of
// run $1, if user $4 may read it, oldest first.
const jobHistorySQL = `
SELECT * FROM (
    SELECT r.number, r.id, j.id, j.state, j.started_at, j.finished_at
    FROM runs x JOIN runs r ON r.project_id = x.project_id JOIN jobs j ON j.run_id = r.id
    WHERE x.id = $1 AND project_rank($4, x.project_id) >= 1 AND j.name = $2
      AND j.started_at IS NOT NULL AND j.finished_at IS NOT NULL
    ORDER BY j.finished_at DESC LIMIT $3) h
ORDER BY finished_at`

// JobRun is one run of a job, for its duration chart.
type JobRun struct {
	RunNumber int64
	RunID     string
	JobID     string
	State     string
	Seconds   float64
	EndedAt   time.Time
}

// JobHistory returns the last n ended runs of the job named name in the
// project of run runID (which u may read), oldest first.
func (s *Store) JobHistory(ctx context.Context, u User, runID, name string, n int) ([]JobRun, error) {
	rows, err := s.pool.Query(ctx, jobHistorySQL, runID, name, n, u.ID)
	if err != nil {
		return nil, fmt.Errorf("job history: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (JobRun, error) {
		var jr JobRun
		var started time.Time
		err := row.Scan(&jr.RunNumber, &jr.RunID, &jr.JobID, &jr.State, &started, &jr.EndedAt)
		jr.Seconds = max(jr.EndedAt.Sub(started).Seconds(), 0)
		return jr, err
	})
}

// branchOutcomesSQL reads, for the $2 branches of project $1 with the
// newest trusted runs, the outcomes of their last $3 ended trusted runs,
// oldest first (an untrusted run says nothing of a branch: migration
// 00028).
const branchOutcomesSQL = `
WITH branches AS (
    SELECT git_ref, max(created_at) AS newest FROM runs
    WHERE project_id = $1 AND git_ref LIKE 'refs/heads/%' AND trusted AND state IN ('PASSED', 'FAILED')
    GROUP BY git_ref ORDER BY newest DESC LIMIT $2
)
SELECT b.git_ref, array_agg(x.state = 'PASSED' ORDER BY x.finished_at)
FROM branches b CROSS JOIN LATERAL (
    SELECT state, finished_at FROM runs r
    WHERE r.project_id = $1 AND r.git_ref = b.git_ref AND r.trusted AND r.state IN ('PASSED', 'FAILED')
    ORDER BY r.finished_at DESC LIMIT $3) x
GROUP BY b.git_ref, b.newest ORDER BY b.newest DESC`

// BranchOutcomes is a branch's last ended runs: passed or not, oldest
// first.
type BranchOutcomes struct {
	Branch string
	Passed []bool
}

// BranchTrends returns, for the branches of a project u may read with the
// newest runs (at most branches), the outcomes of their last n ended runs.
func (s *Store) BranchTrends(ctx context.Context, u User, projectID string, branches, n int) ([]BranchOutcomes, error) {
	p, err := s.GetProject(ctx, u, projectID)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, branchOutcomesSQL, p.ID, branches, n)
	if err != nil {
		return nil, fmt.Errorf("branch trends: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (BranchOutcomes, error) {
		var b BranchOutcomes
		var ref string
		err := row.Scan(&ref, &b.Passed)
		b.Branch = ref[len("refs/heads/"):]
		return b, err
	})
}
