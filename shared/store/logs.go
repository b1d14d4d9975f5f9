package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/mask"
)

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
	err := s.pool.QueryRow(ctx, `
		SELECT j.generation, j.state, j.project_id, j.trusted, j.secret_names FROM jobs j JOIN runs r ON r.id = j.run_id
		WHERE j.id = $1 AND j.run_id = $2 AND (NOT $3 OR `+canRead("$4", "r.project_id")+`)`,
		jobID, runID, u != nil, uid).Scan(&j.current, &j.state, &j.projectID, &j.trusted, &j.secretNames)
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
	rows, err := s.pool.Query(ctx, `
		SELECT name, sealed, value FROM project_secrets WHERE project_id = $1 AND name = ANY ($2)`, projectID, names)
	if err != nil {
		return nil, fmt.Errorf("job secrets: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sealedSecret, error) {
		var sec sealedSecret
		return sec, row.Scan(&sec.Name, &sec.Sealed, &sec.Value)
	})
	if err != nil || len(list) == 0 {
		return nil, err
	}
	var wrapped []byte
	err = s.pool.QueryRow(ctx, `SELECT wrapped_key FROM project_keys WHERE project_id = $1`, projectID).Scan(&wrapped)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("project data key: %w", err)
	}
	values, err := s.openSecrets(ctx, projectID, wrapped, list)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrSecretsUnavailable, err)
	}
	vs := make([]string, 0, len(values))
	for _, v := range values {
		vs = append(vs, v)
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
	var j logJob
	err := s.pool.QueryRow(ctx, `SELECT project_id, trusted, secret_names FROM jobs WHERE id = $1`, jobID).
		Scan(&j.projectID, &j.trusted, &j.secretNames)
	if errors.Is(err, pgx.ErrNoRows) {
		return why // no such job: the lease check refuses the call
	}
	var m *mask.Set
	if err == nil {
		m, err = s.logMask(ctx, j.projectID, j.trusted, j.secretNames)
	}
	if err != nil {
		return "reason withheld: the job's secrets could not be opened to mask it"
	}
	return m.String(why)
}
