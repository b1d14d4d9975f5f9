package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// A log's lines' times and its steps' sections (migration 00017): the
// runner sends both with its appends, under the lease; people read them
// beside the log.

// upsertStepSQL records step event $3.. of attempt ($1, $2): the first
// report of its start, then of its end (with the name as it ran), stands.
const upsertStepSQL = `
INSERT INTO job_steps (job_id, generation, idx, name, log_offset, started_at, end_offset, finished_at, exit_code, conclusion)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''))
ON CONFLICT (job_id, generation, idx) DO UPDATE SET
    -- The name as the step ran comes with its (first) end.
    name        = CASE WHEN job_steps.end_offset IS NULL AND excluded.end_offset IS NOT NULL
                       THEN excluded.name ELSE job_steps.name END,
    end_offset  = coalesce(job_steps.end_offset, excluded.end_offset),
    finished_at = coalesce(job_steps.finished_at, excluded.finished_at),
    exit_code   = coalesce(job_steps.exit_code, excluded.exit_code),
    conclusion  = coalesce(job_steps.conclusion, excluded.conclusion)`

// stepsSQL reads attempt ($1, $2)'s steps in order.
const stepsSQL = `
SELECT idx, name, log_offset, started_at, end_offset, finished_at, exit_code, coalesce(conclusion, ''), now()
FROM job_steps WHERE job_id = $1 AND generation = $2 ORDER BY idx`

// attemptLogEndSQL is the end of attempt ($1, $2)'s stored log.
const attemptLogEndSQL = `
SELECT coalesce(max(start_offset + length(data)), 0) FROM log_chunks WHERE job_id = $1 AND generation = $2`

// timesSQL reads the marks of attempt ($1, $2)'s chunks overlapping the
// bytes [$3, $4).
const timesSQL = `
SELECT start_offset, times FROM log_chunks
WHERE job_id = $1 AND generation = $2 AND times IS NOT NULL
  AND start_offset < $4::bigint AND start_offset + length(data) > $3::bigint
ORDER BY start_offset`

// timesJSON is the marks as stored beside a chunk (nil: none).
func timesJSON(times []protocol.LineTime) ([]byte, error) {
	if len(times) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(times)
	if err != nil {
		return nil, fmt.Errorf("encode times: %w", err)
	}
	return b, nil
}

// recordSteps records an append's step events in its transaction.
func recordSteps(ctx context.Context, tx pgx.Tx, job *LeasedJob, steps []protocol.StepEvent) error {
	if len(steps) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, e := range steps {
		b.Queue(upsertStepSQL, job.ID, job.Generation, e.Index, e.Name, e.LogOffset, e.StartedAt,
			e.EndOffset, e.FinishedAt, e.ExitCode, e.Conclusion)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record steps: %w", err)
	}
	return nil
}

// Step is one step of an attempt as its runner reported it: its section
// of the log is [LogOffset, EndOffset) (EndOffset nil while it runs).
type Step struct {
	Index      int        `json:"index"`
	Name       string     `json:"name"`
	LogOffset  int64      `json:"log_offset"`
	EndOffset  *int64     `json:"end_offset,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Conclusion string     `json:"conclusion,omitempty"`
	// Seconds is how long it ran by its runner's clock (while it runs,
	// until now by the control plane's).
	Seconds float64 `json:"seconds"`
}

// LogIndex is what is known of an attempt's log beside its bytes: its
// steps and, when asked for, its lines' times (absolute offsets).
type LogIndex struct {
	Generation int `json:"generation"`
	// LogEnd is the stored log's end when the steps were read: every
	// step whose section starts before it is in Steps.
	LogEnd int64 `json:"log_end"`
	// JobState is the job's state, so a follower knows when to stop.
	JobState string              `json:"job_state"`
	Steps    []Step              `json:"steps"`
	Times    []protocol.LineTime `json:"times,omitempty"`
	// TimesTo is where the marks returned end: those of the stored bytes
	// from the range's start up to it are all in Times; ask again from
	// there for the rest (one read returns a bounded number).
	TimesTo int64 `json:"times_to,omitempty"`
}

// LogIndexAs returns the steps of the attempt generation (0: the
// current one) of a job u may read (any other is ENotFound), their names
// masked as its log is; with times, the marks of the lines in the stored
// bytes [from, to) (and of the chunks they are in).
func (s *Store) LogIndexAs(ctx context.Context, u User, runID, jobID string, generation int, times bool, from, to int64) (LogIndex, error) {
	job, err := s.logJob(ctx, &u, runID, jobID, generation, 0)
	if err != nil {
		return LogIndex{}, err
	}
	m, err := s.logMask(ctx, job.projectID, job.trusted, job.secretNames)
	if err != nil {
		return LogIndex{}, err
	}
	idx := LogIndex{Generation: job.generation, Steps: []Step{}, JobState: job.state}
	// The end first: a step's start is recorded with (or before) the
	// bytes of its section, so none that starts before it is missed.
	if err := s.pool.QueryRow(ctx, attemptLogEndSQL, jobID, job.generation).Scan(&idx.LogEnd); err != nil {
		return idx, fmt.Errorf("log end: %w", err)
	}
	rows, err := s.pool.Query(ctx, stepsSQL, jobID, job.generation)
	if err != nil {
		return idx, fmt.Errorf("steps: %w", err)
	}
	idx.Steps, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) {
		var st Step
		var now time.Time // the database's, as the step's times: a running step's time so far
		err := row.Scan(&st.Index, &st.Name, &st.LogOffset, &st.StartedAt, &st.EndOffset, &st.FinishedAt, &st.ExitCode, &st.Conclusion, &now)
		st.Name = m.String(st.Name)
		end := now
		switch {
		case st.FinishedAt != nil:
			end = *st.FinishedAt
		case domain.JobTerminal(job.state):
			end = st.StartedAt // it never ended (its runner was lost): no time is known
		}
		st.Seconds = max(end.Sub(st.StartedAt).Seconds(), 0)
		return st, err
	})
	if err != nil || !times {
		return idx, err
	}
	// Marks of bytes past the end read first may be missing yet: they
	// are for a later read.
	idx.Times, idx.TimesTo, err = s.logTimes(ctx, jobID, job.generation, min(from, idx.LogEnd), min(to, idx.LogEnd))
	return idx, err
}

// maxTimesRead bounds the marks one read returns (about 30 bytes each in
// JSON: well within a Lambda response).
const maxTimesRead = 1 << 16

// logTimes reads the marks of the chunks overlapping [from, to), as
// absolute offsets, whole chunks at a time up to maxTimesRead, and where
// what it read ends: to, or the start of the first chunk left out.
func (s *Store) logTimes(ctx context.Context, jobID string, generation int, from, to int64) ([]protocol.LineTime, int64, error) {
	if from < 0 || to < from {
		return nil, 0, domain.Errorf(domain.EInvalid, "a range of the log is from 0 up, and ends after it starts")
	}
	rows, err := s.pool.Query(ctx, timesSQL, jobID, generation, from, to)
	if err != nil {
		return nil, 0, fmt.Errorf("log times: %w", err)
	}
	defer rows.Close()
	out, end := []protocol.LineTime{}, to
	for rows.Next() {
		var start int64
		var marks []protocol.LineTime
		if err := rows.Scan(&start, &marks); err != nil {
			return nil, 0, fmt.Errorf("log times: %w", err)
		}
		if len(out)+len(marks) > maxTimesRead && len(out) > 0 {
			end = max(start, from)
			break
		}
		for _, t := range marks {
			out = append(out, protocol.LineTime{start + t.Offset(), t[1]})
		}
	}
	return out, end, rows.Err()
}
