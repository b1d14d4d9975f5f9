package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The queue as people see it when "CI is slow": what waits, for how long,
// for which labels, and which registered runners could take it.

// queueSQL lists the queued jobs of the projects user $1 may read, oldest
// first, at most $2, each with the runners that could take it (labels,
// scope, trust tier and the features they last declared: a runner that
// never polled idle has declared none yet, and counts), and how many of
// those are alive: polled in the last two minutes, or hold a lease.
const queueSQL = `
SELECT j.id, j.run_id, ru.number, p.name, j.name, j.labels, j.queued_at, now(),
       coalesce(array_agg(r.name ORDER BY r.name) FILTER (WHERE r.id IS NOT NULL), '{}'),
       count(r.id) FILTER (WHERE r.last_seen_at > now() - interval '2 minutes'
                           OR EXISTS (SELECT 1 FROM jobs b WHERE b.runner_id = r.id AND b.state = 'RUNNING'))
FROM jobs j JOIN runs ru ON ru.id = j.run_id JOIN projects p ON p.id = ru.project_id
LEFT JOIN runners r ON r.revoked_at IS NULL AND j.labels <@ r.labels
     AND (cardinality(r.projects) = 0 OR j.project_id = ANY (r.projects)) AND (j.trusted OR r.untrusted)
     AND NOT (j.trusted AND r.untrusted_only)
     AND (j.features = '{}'::text[] OR r.features IS NULL OR j.features <@ r.features)
WHERE j.state = 'QUEUED' AND project_rank($1, p.id) >= 1
GROUP BY j.id, ru.number, p.name
ORDER BY j.queued_at, j.id LIMIT $2`

// maxQueueShown bounds the queue a page shows (the oldest).
const maxQueueShown = 500

// QueuedJob is a job waiting for a runner.
type QueuedJob struct {
	JobID     string    `json:"job_id"`
	RunID     string    `json:"run_id"`
	RunNumber int64     `json:"run_number"`
	Project   string    `json:"project"`
	Name      string    `json:"name"`
	Labels    []string  `json:"labels"`
	QueuedAt  time.Time `json:"queued_at"`
	Waiting   float64   `json:"waiting_seconds"`
	// Runners could take it (names, for global admins only; others see
	// how many); Alive of them polled in the last two minutes or hold a
	// lease.
	Runners  []string `json:"runners,omitempty"`
	Eligible int      `json:"eligible"`
	Alive    int      `json:"alive"`
}

// Queue returns the oldest queued jobs u may read.
func (s *Store) Queue(ctx context.Context, u User) ([]QueuedJob, error) {
	rows, err := s.pool.Query(ctx, queueSQL, u.ID, maxQueueShown)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueuedJob, error) {
		var q QueuedJob
		var now time.Time
		err := row.Scan(&q.JobID, &q.RunID, &q.RunNumber, &q.Project, &q.Name, &q.Labels, &q.QueuedAt, &now, &q.Runners, &q.Alive)
		q.Waiting = max(now.Sub(q.QueuedAt).Seconds(), 0)
		q.Eligible = len(q.Runners)
		if !u.IsAdmin() {
			q.Runners = nil // runners are the installation's: admins see them
		}
		return q, err
	})
}
