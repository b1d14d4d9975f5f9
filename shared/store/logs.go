package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/mask"
	"github.com/forgeci/forgeci/shared/protocol"
)

// Logs: appended by runners under their lease (the fast path one
// statement), read by people masked.

// appendLogSQL is the log append's fast path: the whole lease check under
// FOR KEY SHARE of the job row (held until commit; see withLease), and the
// chunk inserted only if it starts at the attempt's current end and stays
// within the job's log budget (jobs.log_limit: at most logGrant past where
// the slow path last checked the attempt's and the run's limits exactly,
// granting each job a quarter of what the run had left, so that jobs of a
// run logging at once can pass the run's limit by little; an attempt
// starts with none, so its first append is checked against the run's
// logs, those of earlier jobs and attempts too).
// Two appends racing at one offset cannot both land: the second hits the
// primary key (job, generation, start_offset). It matches nothing, and
// the slow path takes over (with exact limits), for every
// other case.
const appendLogSQL = `
INSERT INTO log_chunks (job_id, generation, start_offset, data, times)
SELECT j.id, j.generation, $6, $7, $9 FROM jobs j
WHERE ` + leaseMatchSQL + `
  AND ` + logEndSQL + ` = $6 AND $6 + $8::bigint <= j.log_limit
FOR KEY SHARE OF j`

// logEndOfJobSQL is the end of job $1's log of generation $2 (the slow
// path's, under the row's lock).
const logEndOfJobSQL = `SELECT ` + logEndSQL + ` FROM jobs j WHERE j.id = $1 AND j.generation = $2`

// setLogLimitSQL sets job $1's log budget for the fast path.
const setLogLimitSQL = `UPDATE jobs SET log_limit = $2 WHERE id = $1`

const insertLogChunkSQL = `INSERT INTO log_chunks (job_id, generation, start_offset, data, times) VALUES ($1, $2, $3, $4, $5)`

// otherLogsSQL is the size of run $1's logs but that of job $2's running
// attempt: other running attempts' logs as they stand, and every ended
// attempt's, exact (those of attempts retried too: they are kept, and
// readable).
const otherLogsSQL = `
SELECT coalesce((SELECT sum(` + logEndSQL + `) FROM jobs j WHERE j.run_id = $1 AND j.id <> $2 AND j.state = 'RUNNING'), 0) +
       coalesce((SELECT sum(a.log_size) FROM job_attempts a JOIN jobs j ON j.id = a.job_id WHERE j.run_id = $1), 0)`

// readLogSQL reads the chunks of job $1's log of generation $2 that
// overlap the bytes [$3, $3+$4).
const readLogSQL = `
SELECT start_offset, data FROM log_chunks
WHERE job_id = $1 AND generation = $2
  AND start_offset < $3::bigint + $4::bigint AND start_offset + length(data) > $3::bigint
ORDER BY start_offset`

// logJobSQL looks up job $1 of run $2 for a log read; with $3, only if
// user $4 may read its project.
const logJobSQL = `
SELECT j.generation, j.state, j.project_id, j.trusted, j.secret_names FROM jobs j JOIN runs r ON r.id = j.run_id
WHERE j.id = $1 AND j.run_id = $2 AND (NOT $3 OR project_rank($4, r.project_id) >= 1)`

// jobSecretsSQL reads project $1's secrets named in $2, of the project and
// of every environment (a job may have been given either), sealed or
// (legacy) plain.
const jobSecretsSQL = `SELECT name, environment, sealed, value FROM project_secrets WHERE project_id = $1 AND name = ANY ($2)`

// jobMaskSQL is what masking job $1's text needs: its project, tier and secret names.
const jobMaskSQL = `SELECT project_id, trusted, secret_names FROM jobs WHERE id = $1`

// MaxLogChunk is the most bytes one log append may carry.
const MaxLogChunk = 1 << 20

// AppendLog appends data at offset to the current attempt's log.
//
// Per DESIGN.md: an append must start at the current end; resending a range
// that is already stored, byte for byte, is accepted as a no-op so that a
// runner may retry after a lost response; anything else is EOffsetMismatch
// carrying the current end. It returns the log's end after the call.
func (s *Store) AppendLog(ctx context.Context, runnerID, jobID string, l domain.Lease, offset int64, data []byte) (next int64, err error) {
	return s.AppendLogWith(ctx, runnerID, jobID, l, LogAppend{Offset: offset, Data: data})
}

// LogAppend is one append: data at offset, the times the runner saw its
// lines, and the steps that started or ended (protocol.LogsRequest).
type LogAppend struct {
	Offset int64
	Data   []byte
	Times  []protocol.LineTime
	Steps  []protocol.StepEvent
}

// AppendLogWith is AppendLog with the lines' times, kept beside the
// chunk, and step events, recorded in the same transaction once the
// append is accepted (a resend repeats them, and the first report of a
// step's start or end stands).
func (s *Store) AppendLogWith(ctx context.Context, runnerID, jobID string, l domain.Lease, a LogAppend) (next int64, err error) {
	offset, data := a.Offset, a.Data
	if offset < 0 {
		return 0, domain.Errorf(domain.EInvalid, "field offset must not be negative")
	}
	if len(data) > MaxLogChunk {
		return 0, domain.Errorf(domain.ETooLarge, "a log append may carry at most %d bytes, got %d", MaxLogChunk, len(data))
	}
	if err := checkTuple(runnerID, jobID, l); err != nil {
		return 0, err
	}
	times, err := timesJSON(a.Times)
	if err != nil {
		return 0, err
	}
	// The fast path: the common append, at the end, in one statement.
	if len(data) > 0 && len(a.Steps) == 0 {
		tag, err := s.pool.Exec(ctx, appendLogSQL, l.JobID, l.RunID, l.RunnerID, l.LeaseID, l.Generation,
			offset, data, int64(len(data)), times)
		switch {
		case err == nil && tag.RowsAffected() == 1:
			return offset + int64(len(data)), nil
		case err != nil && !isUniqueViolation(err):
			// A unique violation is a concurrent append at the same
			// offset, classified below; anything else is a real failure.
			return 0, fmt.Errorf("append log: %w", err)
		}
	}
	err = s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		var err error
		if next, err = s.appendLocked(ctx, tx, job, offset, data, times); err != nil {
			return err
		}
		return recordSteps(ctx, tx, job, a.Steps)
	})
	return next, err
}

// appendLocked is AppendLog's slow path, under the job row's lock (FOR
// UPDATE, so no append is in flight): the exact limits, a new budget for
// the fast path, an identical resend accepted, anything else refused with
// the log's end.
func (s *Store) appendLocked(ctx context.Context, tx pgx.Tx, job *LeasedJob, offset int64, data, times []byte) (int64, error) {
	var end int64
	if err := tx.QueryRow(ctx, logEndOfJobSQL, job.ID, job.Generation).Scan(&end); err != nil {
		return 0, fmt.Errorf("log end: %w", err)
	}
	n := int64(len(data))
	switch {
	case offset == end:
		if n == 0 {
			return end, nil
		}
		if end+n > s.limits.MaxLogBytes {
			return 0, domain.Errorf(domain.ETooLarge, "job log would exceed the limit of %d bytes", s.limits.MaxLogBytes)
		}
		others, err := s.otherLogs(ctx, tx, job)
		if err != nil {
			return 0, err
		}
		if others+end+n > s.limits.MaxRunLogBytes {
			return 0, domain.Errorf(domain.ETooLarge, "the run's logs would exceed the run limit of %d bytes", s.limits.MaxRunLogBytes)
		}
		// A new budget for the fast path: a share of what the run has left.
		grant := min(logGrant, (s.limits.MaxRunLogBytes-others-end-n)/4)
		if _, err := tx.Exec(ctx, setLogLimitSQL, job.ID, min(s.limits.MaxLogBytes, end+n+grant)); err != nil {
			return 0, fmt.Errorf("log budget: %w", err)
		}
		if _, err := tx.Exec(ctx, insertLogChunkSQL, job.ID, job.Generation, end, data, times); err != nil {
			return 0, fmt.Errorf("insert log chunk: %w", err)
		}
		return end + n, nil
	case offset+n <= end:
		stored, err := readLog(ctx, tx, job.ID, job.Generation, offset, n)
		if err != nil {
			return 0, err
		}
		if bytes.Equal(stored, data) {
			return end, nil // an identical resend: nothing to do
		}
	}
	return 0, &domain.Error{Code: domain.EOffsetMismatch, NextOffset: &end,
		Message: fmt.Sprintf("offset %d with %d bytes does not append at the log's end %d nor repeat stored bytes", offset, n, end)}
}

// logGrant is the most log a job may append on the fast path before the
// slow path looks at its run again (see appendLogSQL).
const logGrant = 4 << 20

// otherLogs is the size of the logs of the locked job's run but its own
// running attempt's (otherLogsSQL).
func (s *Store) otherLogs(ctx context.Context, tx pgx.Tx, job *LeasedJob) (int64, error) {
	var others int64
	err := tx.QueryRow(ctx, otherLogsSQL, job.RunID, job.ID).Scan(&others)
	if err != nil {
		return 0, fmt.Errorf("run log size: %w", err)
	}
	return others, nil
}

// readLog returns the bytes [offset, offset+n) of one attempt's log.
func readLog(ctx context.Context, q pgx.Tx, jobID string, generation int, offset, n int64) ([]byte, error) {
	rows, err := q.Query(ctx, readLogSQL, jobID, generation, offset, n)
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	defer rows.Close()
	out := make([]byte, 0, n)
	for rows.Next() {
		var start int64
		var data []byte
		if err := rows.Scan(&start, &data); err != nil {
			return nil, fmt.Errorf("read log: %w", err)
		}
		lo := max(offset-start, 0)
		hi := min(offset+n-start, int64(len(data)))
		out = append(out, data[lo:hi]...)
	}
	return out, rows.Err()
}

// Logs are stored exactly as the runner sent them; what people are shown
// is masked again here, with the secrets the job was given, so that a
// runner that did not mask (or masked less) does not put a secret on a
// page. Offsets always count stored bytes.

// LogWindow is part of a job's log as it is shown: the stored bytes
// [Offset, NextOffset), masked. Masked text may be shorter or longer than
// the bytes it stands for.
type LogWindow struct {
	Data       []byte
	Offset     int64
	NextOffset int64
	Generation int
}

// ReadLog returns up to limit stored bytes of a job's log from offset, for
// the given generation (0: the current one), and the generation read: not
// masked (operator tools and tests; people use ReadLogAs).
func (s *Store) ReadLog(ctx context.Context, runID, jobID string, generation int, offset, limit int64) ([]byte, int, error) {
	job, err := s.logJob(ctx, nil, runID, jobID, generation, offset)
	if err != nil {
		return nil, 0, err
	}
	out, err := s.readLogTx(ctx, jobID, job.generation, offset, limit)
	return out, job.generation, err
}

// ReadLogAs returns up to limit stored bytes of the log of a job u may
// read (any other is ENotFound), from offset, for the given generation (0:
// the current one), masked with the job's secrets. Context around the
// window is read so that a secret straddling its edges is masked; while
// the attempt runs, bytes at the log's end that may begin a secret are
// held back (NextOffset stops before them). EUnavailable when the job's
// secrets cannot be opened: nothing is shown unmasked.
func (s *Store) ReadLogAs(ctx context.Context, u User, runID, jobID string, generation int, offset, limit int64) (LogWindow, error) {
	job, err := s.logJob(ctx, &u, runID, jobID, generation, offset)
	if err != nil {
		return LogWindow{}, err
	}
	m, err := s.logMask(ctx, job.projectID, job.trusted, job.secretNames)
	if err != nil {
		return LogWindow{}, err
	}
	w := LogWindow{Offset: offset, NextOffset: offset, Generation: job.generation}
	margin := int64(max(m.Longest()-1, 0))
	lo := max(offset-margin, 0)
	buf, err := s.readLogTx(ctx, jobID, job.generation, lo, offset-lo+limit+margin)
	if err != nil || lo+int64(len(buf)) <= offset {
		return w, err // nothing stored from offset on (yet)
	}
	// Only the current attempt of a running job can still grow.
	final := job.generation != job.current || job.state != domain.JobRunning
	whi := min(offset+limit-lo, int64(len(buf)))
	data, end := m.Window(buf, int(offset-lo), int(whi), final)
	w.Data, w.NextOffset = data, lo+int64(end)
	return w, nil
}

// logJob is what reading a job's log needs to know of the job.
type logJob struct {
	generation, current int
	state               string
	projectID           string
	trusted             bool
	secretNames         []string
}

// logJob checks the arguments of a log read and looks the job up (as u,
// when not nil); generation 0 becomes the current one.
func (s *Store) logJob(ctx context.Context, u *User, runID, jobID string, generation int, offset int64) (logJob, error) {
	var j logJob
	if offset < 0 || offset > s.limits.MaxLogBytes {
		return j, domain.Errorf(domain.EInvalid, "offset must be from 0 to %d (the log limit)", s.limits.MaxLogBytes)
	}
	if generation < 0 || generation > math.MaxInt32 {
		return j, domain.Errorf(domain.EInvalid, "generation must be from 0 to %d", math.MaxInt32)
	}
	uid := ""
	if u != nil {
		uid = u.ID
	}
	err := s.pool.QueryRow(ctx, logJobSQL, jobID, runID, u != nil, uid).Scan(&j.current, &j.state, &j.projectID, &j.trusted, &j.secretNames)
	if errors.Is(err, pgx.ErrNoRows) {
		return j, domain.Errorf(domain.ENotFound, "job %s not found in run %s", jobID, runID)
	}
	if err != nil {
		return j, fmt.Errorf("read log: %w", err)
	}
	j.generation = generation
	if generation == 0 {
		j.generation = j.current
	}
	return j, nil
}

// readLogTx reads stored log bytes in one transaction, so that chunks
// being merged (compactLogs) are seen all before or all after.
func (s *Store) readLogTx(ctx context.Context, jobID string, generation int, offset, n int64) ([]byte, error) {
	var out []byte
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = readLog(ctx, tx, jobID, generation, offset, n)
		return err
	})
	return out, err
}

// ErrSecretsUnavailable is a log that cannot be shown because the job's
// secrets, needed to mask it, cannot be opened now.
var ErrSecretsUnavailable = domain.Errorf(domain.EUnavailable,
	"the job's secrets cannot be opened now to mask its log, so it is not shown; try again later")

// logMask is the mask of a job's log: the current values of the secrets
// the job names, opened once (the project's data key is cached). A job
// of an untrusted run was given no secret, so it needs none. A secret
// deleted since is no longer known, and a changed one masks its new value.
func (s *Store) logMask(ctx context.Context, projectID string, trusted bool, names []string) (*mask.Set, error) {
	if !trusted || len(names) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, jobSecretsSQL, projectID, names)
	if err != nil {
		return nil, fmt.Errorf("job secrets: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sealedSecret, error) {
		var sec sealedSecret
		return sec, row.Scan(&sec.Name, &sec.Environment, &sec.Sealed, &sec.Value)
	})
	if err != nil || len(list) == 0 {
		return nil, err
	}
	var wrapped []byte
	err = s.pool.QueryRow(ctx, projectKeySQL, projectID).Scan(&wrapped)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("project data key: %w", err)
	}
	vs, err := s.openEach(ctx, projectID, wrapped, list)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrSecretsUnavailable, err)
	}
	return mask.New(vs), nil
}

// maskReason masks a runner's reason for a job's end with the job's
// secrets, before it is stored and shown anywhere. When they cannot be
// opened, the reason is withheld rather than stored unmasked.
func (s *Store) maskReason(ctx context.Context, jobID, why string) string {
	if why == "" {
		return ""
	}
	m, err := s.jobMask(ctx, jobID)
	if err != nil {
		return "reason withheld: the job's secrets could not be opened to mask it"
	}
	return m.String(why)
}

// jobMask is the mask of job jobID's text (nil: none is needed, or no
// such job, which the lease check then refuses).
func (s *Store) jobMask(ctx context.Context, jobID string) (*mask.Set, error) {
	var j logJob
	err := s.pool.QueryRow(ctx, jobMaskSQL, jobID).Scan(&j.projectID, &j.trusted, &j.secretNames)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.logMask(ctx, j.projectID, j.trusted, j.secretNames)
}
