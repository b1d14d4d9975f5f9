package store

import (
	"context"
	"fmt"
	"time"
)

// Demand is what one runner group (package scaling) has to do: jobs its
// labels cover that are queued (and of those, queued for at least the
// scaler's wait), jobs its runner runs, and when its runner last ended a
// job.
type Demand struct {
	Queued, Waiting, Running int
	LastEnded                *time.Time
}

// groupDemandSQL: $1 the group's labels, $2 its wait in seconds, $3 its
// runner's name (every instance of the group shares one identity, made by
// the first). Queued jobs count only where that runner's scope would
// take them (its projects and trust tiers), so that a job no instance
// would claim never keeps instances coming; before the runner exists,
// every covered job counts. When only revoked runners of that name exist,
// none does: instances would boot with the revoked token, fail and be
// replaced for as long as jobs wait (infra/README.md says how to start
// the group again). Jobs that need runner features the runner did not
// declare when it last polled (an image with an older runner) count for
// one instance at most, however many wait: it boots, polls, and takes
// them if its image was upgraded since; otherwise it idles out. Counting
// them all would keep the group full of instances that claim nothing;
// counting none would never learn of an upgrade, since only a booted
// instance polls.
const groupDemandSQL = `
WITH r AS (SELECT id, projects, untrusted, features FROM runners WHERE name = $3 AND revoked_at IS NULL
           ORDER BY created_at DESC LIMIT 1),
q AS (
    SELECT j.state, j.queued_at, j.runner_id,
           j.features = '{}'::text[] OR NOT EXISTS (SELECT 1 FROM r WHERE r.features IS NOT NULL AND NOT j.features <@ r.features) AS fits
    FROM jobs j
    WHERE j.state IN ('QUEUED', 'RUNNING') AND j.labels <@ $1::text[]
      AND (NOT EXISTS (SELECT 1 FROM runners WHERE name = $3) OR EXISTS (SELECT 1 FROM r
           WHERE (cardinality(r.projects) = 0 OR j.project_id = ANY (r.projects)) AND (j.trusted OR r.untrusted)))
),
w AS (SELECT *, state = 'QUEUED' AND queued_at <= now() - make_interval(secs => $2) AS waited FROM q)
SELECT count(*) FILTER (WHERE state = 'QUEUED' AND fits) + least(count(*) FILTER (WHERE state = 'QUEUED' AND NOT fits), 1),
       count(*) FILTER (WHERE waited AND fits) + least(count(*) FILTER (WHERE waited AND NOT fits), 1),
       count(*) FILTER (WHERE state = 'RUNNING' AND runner_id IN (SELECT id FROM r)),
       (SELECT max(a.ended_at) FROM job_attempts a WHERE a.runner_id IN (SELECT id FROM r))
FROM w`

// GroupDemand reads a runner group's demand.
func (s *Store) GroupDemand(ctx context.Context, labels []string, wait time.Duration, runnerName string) (Demand, error) {
	var d Demand
	err := s.pool.QueryRow(ctx, groupDemandSQL, nonNil(labels), wait.Seconds(), runnerName).Scan(
		&d.Queued, &d.Waiting, &d.Running, &d.LastEnded)
	if err != nil {
		return d, fmt.Errorf("group demand: %w", err)
	}
	return d, nil
}
