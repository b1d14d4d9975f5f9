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
	// Queued and Waiting count the queued jobs the group's runner would
	// take (and of those, the ones queued for the wait); Jobs are the first
	// of them in queue order, as many as GroupDemand was asked for, so
	// that the scaler can give each job to one group.
	Queued, Waiting, Running int
	Jobs                     []GroupJob
	// Probe is 1 when a probe instance is due for jobs that need features
	// the runner lacks (only while none it can take is queued), and
	// ProbeWaited 1 when one of those has waited.
	Probe, ProbeWaited int
	LastEnded          *time.Time
	// LastSeen is when the group's runner last polled (nil: it never
	// registered, or never polled).
	LastSeen *time.Time
	// Unfit counts the queued jobs that need features the runner lacks
	// (whether or not they are due a probe now).
	Unfit int
}

// GroupJob is a queued job a group could take; Waited says it was
// queued for at least the group's wait.
type GroupJob struct {
	ID       string
	Waited   bool
	QueuedAt time.Time
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
// one instance at most, however many wait, and only while no job it can
// take is queued (that one's instance polls anyway) and it has not polled
// since the job was queued, within the hour: the instance boots, polls,
// and takes them if its image was upgraded since; otherwise it idles out,
// and the next probe is an hour later. Counting them all would keep the
// group full of instances that claim nothing; counting none would never
// learn of an upgrade, since only a booted instance polls.
const groupDemandSQL = `
WITH r AS (SELECT id, projects, untrusted, untrusted_only, features, last_seen_at FROM runners WHERE name = $3 AND revoked_at IS NULL
           ORDER BY created_at DESC LIMIT 1),
q AS (
    SELECT j.id, j.queued_at, j.state, j.runner_id, j.state = 'QUEUED' AND j.queued_at <= now() - make_interval(secs => $2) AS waited,
           j.features = '{}'::text[] OR NOT EXISTS (SELECT 1 FROM r WHERE r.features IS NOT NULL AND NOT j.features <@ r.features) AS fits,
           NOT EXISTS (SELECT 1 FROM r WHERE r.last_seen_at >= greatest(j.queued_at, now() - interval '1 hour')) AS probe
    FROM jobs j
    WHERE j.state IN ('QUEUED', 'RUNNING') AND j.labels <@ $1::text[]
      AND (NOT EXISTS (SELECT 1 FROM runners WHERE name = $3) OR EXISTS (SELECT 1 FROM r
           WHERE (cardinality(r.projects) = 0 OR j.project_id = ANY (r.projects)) AND (j.trusted OR r.untrusted)
             AND NOT (j.trusted AND r.untrusted_only)))
),
n AS (
    SELECT count(*) FILTER (WHERE state = 'QUEUED' AND fits) AS queued,
           count(*) FILTER (WHERE waited AND fits) AS waiting,
           count(*) FILTER (WHERE state = 'QUEUED' AND NOT fits AND probe) AS probes,
           count(*) FILTER (WHERE waited AND NOT fits AND probe) AS waiting_probes,
           count(*) FILTER (WHERE state = 'RUNNING' AND runner_id IN (SELECT id FROM r)) AS running,
           count(*) FILTER (WHERE state = 'QUEUED' AND NOT fits) AS unfit
    FROM q
),
f AS (SELECT id, queued_at, waited FROM q WHERE state = 'QUEUED' AND fits ORDER BY queued_at, id LIMIT $4)
SELECT queued, waiting, CASE WHEN queued = 0 THEN least(probes, 1) ELSE 0 END,
       CASE WHEN queued = 0 THEN least(waiting_probes, 1) ELSE 0 END,
       running,
       (SELECT max(a.ended_at) FROM job_attempts a WHERE a.runner_id IN (SELECT id FROM r)),
       (SELECT last_seen_at FROM r), unfit,
       (SELECT coalesce(array_agg(id::text ORDER BY queued_at, id), '{}') FROM f),
       (SELECT coalesce(array_agg(waited ORDER BY queued_at, id), '{}') FROM f),
       (SELECT coalesce(array_agg(queued_at ORDER BY queued_at, id), '{}') FROM f)
FROM n`

// GroupDemand reads a runner group's demand, with the first jobs of its
// queue, at most jobs of them.
func (s *Store) GroupDemand(ctx context.Context, labels []string, wait time.Duration, runnerName string, jobs int) (Demand, error) {
	var d Demand
	var ids []string
	var waited []bool
	var queuedAt []time.Time
	err := s.pool.QueryRow(ctx, groupDemandSQL, nonNil(labels), wait.Seconds(), runnerName, jobs).Scan(
		&d.Queued, &d.Waiting, &d.Probe, &d.ProbeWaited, &d.Running, &d.LastEnded, &d.LastSeen, &d.Unfit, &ids, &waited, &queuedAt)
	if err != nil {
		return d, fmt.Errorf("group demand: %w", err)
	}
	for i, id := range ids {
		d.Jobs = append(d.Jobs, GroupJob{ID: id, Waited: waited[i], QueuedAt: queuedAt[i]})
	}
	return d, nil
}
