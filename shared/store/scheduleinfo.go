package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ScheduleInfo is a project's schedule as people see it: when it fires
// next, and its last firing (how late, the run it made or why none).
type ScheduleInfo struct {
	Cron        string     `json:"cron"`
	Missed      string     `json:"missed"`
	Next        time.Time  `json:"next"`
	LastSlot    *time.Time `json:"last_slot,omitempty"`
	LastFiredAt *time.Time `json:"last_fired_at,omitempty"`
	LastRunID   string     `json:"last_run_id,omitempty"`
	LastSkipped bool       `json:"last_skipped,omitempty"`
	LastNote    string     `json:"last_note,omitempty"`
}

// Late is how long after its slot the last firing came.
func (i ScheduleInfo) Late() time.Duration {
	if i.LastSlot == nil || i.LastFiredAt == nil {
		return 0
	}
	return i.LastFiredAt.Sub(*i.LastSlot).Round(time.Second)
}

// projectSchedulesSQL lists project $1's schedules with their last firing
// and the database's now, for user $2 who may read the project.
const projectSchedulesSQL = `
SELECT s.cron, s.missed, now(), f.slot, f.fired_at, coalesce(f.run_id, ''), coalesce(f.skipped, false), coalesce(f.note, '')
FROM schedules s
LEFT JOIN LATERAL (SELECT * FROM schedule_firings f WHERE f.project_id = s.project_id AND f.cron = s.cron
                   ORDER BY f.slot DESC LIMIT 1) f ON true
WHERE s.project_id = $1 AND project_rank($2, s.project_id) >= 1
ORDER BY s.cron`

// Schedules are the project's schedules, for a user who may read it.
func (s *Store) Schedules(ctx context.Context, u User, projectID string) ([]ScheduleInfo, error) {
	rows, err := s.pool.Query(ctx, projectSchedulesSQL, projectID, u.ID)
	if err != nil {
		return nil, fmt.Errorf("schedules: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ScheduleInfo, error) {
		var i ScheduleInfo
		var now time.Time
		if err := row.Scan(&i.Cron, &i.Missed, &now, &i.LastSlot, &i.LastFiredAt, &i.LastRunID, &i.LastSkipped, &i.LastNote); err != nil {
			return i, err
		}
		if sched, err := cronParser.Parse(i.Cron); err == nil {
			i.Next = sched.Next(now.UTC())
		}
		return i, nil
	})
}
