package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Log compaction: a log is stored as one chunk per append, however small
// (the append is one INSERT, which keeps the hot path cheap), so a job that
// prints a line at a time leaves a row per line. Once its attempt has ended
// nothing appends to it any more, and the collector merges its chunks into
// chunks of up to compactChunk bytes: stored rows then grow with bytes, not
// with writes. A reader's query sees the chunks before or after a merge,
// never half of it (one statement, one snapshot).

// uncompactedSQL locks up to $1 ended attempts whose logs are not
// compacted yet, oldest first.
const uncompactedSQL = `
SELECT job_id, generation FROM job_attempts WHERE NOT log_compacted
ORDER BY ended_at LIMIT $1 FOR UPDATE SKIP LOCKED`

const markCompactedSQL = `UPDATE job_attempts SET log_compacted = true WHERE job_id = $1 AND generation = $2`

// chunkSpansSQL lists where each chunk of job $1's log of generation $2
// starts and how long it is.
const chunkSpansSQL = `
SELECT start_offset, length(data) FROM log_chunks WHERE job_id = $1 AND generation = $2 ORDER BY start_offset`

// mergeChunksSQL replaces the chunks of job $1's log of generation $2
// that start from $3 to $4 by one chunk at $3, with their lines' marks
// (moved to the merged chunk's offsets), in one statement (readers see
// all of them or the merged one).
const mergeChunksSQL = `
WITH gone AS (
    DELETE FROM log_chunks WHERE job_id = $1 AND generation = $2 AND start_offset BETWEEN $3 AND $4
    RETURNING start_offset, data, times
), marks AS (
    SELECT jsonb_agg(jsonb_build_array((m.mark->>0)::bigint + g.start_offset - $3, m.mark->1)
                     ORDER BY g.start_offset, m.n) AS times
    FROM gone g, jsonb_array_elements(coalesce(g.times, '[]'::jsonb)) WITH ORDINALITY AS m (mark, n)
)
INSERT INTO log_chunks (job_id, generation, start_offset, data, times)
SELECT $1, $2, $3, string_agg(data, ''::bytea ORDER BY start_offset), (SELECT times FROM marks) FROM gone`

const compactChunk = 256 << 10

// compactLogs compacts the logs of up to n ended attempts.
func (s *Store) compactLogs(ctx context.Context, n int) (int, error) {
	type attempt struct {
		job        string
		generation int
	}
	scan := func(row pgx.CollectableRow) (attempt, error) {
		var a attempt
		return a, row.Scan(&a.job, &a.generation)
	}
	return collectBatch(ctx, s, uncompactedSQL, []any{n}, scan, func(tx pgx.Tx, list []attempt) (int, error) {
		for _, a := range list {
			if err := compactAttempt(ctx, tx, a.job, a.generation); err != nil {
				return 0, fmt.Errorf("compact log of %s/%d: %w", a.job, a.generation, err)
			}
			if _, err := tx.Exec(ctx, markCompactedSQL, a.job, a.generation); err != nil {
				return 0, err
			}
		}
		return len(list), nil
	})
}

// compactAttempt merges one attempt's runs of small chunks, a window of at
// most compactChunk bytes at a time (so memory stays bounded), each window
// replaced by one chunk at its start.
func compactAttempt(ctx context.Context, tx pgx.Tx, jobID string, generation int) error {
	rows, err := tx.Query(ctx, chunkSpansSQL, jobID, generation)
	if err != nil {
		return err
	}
	type span struct{ start, n int64 }
	chunks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (span, error) {
		var c span
		return c, row.Scan(&c.start, &c.n)
	})
	if err != nil {
		return err
	}
	// Windows of consecutive chunks that together fit in compactChunk.
	for i := 0; i < len(chunks); {
		j, size := i, int64(0)
		for j < len(chunks) && size+chunks[j].n <= compactChunk {
			size += chunks[j].n
			j++
		}
		if j-i < 2 {
			i = max(j, i+1)
			continue
		}
		from, to := chunks[i].start, chunks[j-1].start
		if _, err := tx.Exec(ctx, mergeChunksSQL, jobID, generation, from, to); err != nil {
			return err
		}
		i = j
	}
	return nil
}
