package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/snapshot"
)

// Dump is the final state the checker judges: the database's rows and
// what the artifacts' blobs in S3 hold. Times are Unix nanoseconds on the
// database's clock.
type Dump struct {
	// ClockOffset is the database clock minus the harness clock.
	ClockOffset int64         `json:"clock_offset"`
	LeaseTTL    time.Duration `json:"lease_ttl"`
	SweepEvery  time.Duration `json:"sweep_every"`
	Runs        []DumpRun     `json:"runs"`
	Jobs        []DumpJob     `json:"jobs"`
	Attempts    []DumpAttempt `json:"attempts"`
	Logs        []DumpLog     `json:"logs"`
	Artifacts   []DumpBlob    `json:"artifacts"`
	Pending     []DumpBlob    `json:"pending_caches"`
	Caches      []DumpBlob    `json:"caches"`
	Audit       []DumpAudit   `json:"audit"`
}

type DumpRun struct{ ID, State string }

type DumpJob struct {
	ID, RunID, Name, State, Reason string
	Generation                     int
}

type DumpAttempt struct {
	JobID, RunnerID, LeaseID, Outcome, Reason string
	Generation                                int
	LogSize, Started, Ended                   int64
}

// DumpLog is one attempt's log: its chunks (start, length) and bytes.
type DumpLog struct {
	JobID      string
	Generation int
	Chunks     [][2]int64
	Data       string
}

// DumpBlob is an artifact, a staged cache or a cache entry, with (for
// artifacts) what its blob holds: its digest checked and dist/stamp read.
type DumpBlob struct {
	JobID, Name, Digest string
	Key                 string `json:",omitempty"` // where the bytes are in the CAS
	Generation          int
	Stamp               string `json:",omitempty"`
	BlobErr             string `json:",omitempty"`
}

type DumpAudit struct {
	Seq                                                        int64
	At, Expires                                                int64
	Kind, JobID, OldState, NewState, LeaseID, RunnerID, Detail string
	Generation                                                 int
	OK                                                         bool
}

func (h *Harness) dump(ctx context.Context) (*Dump, error) {
	d := &Dump{LeaseTTL: h.cfg.LeaseTTL, SweepEvery: h.cfg.SweepEvery}
	err := h.withAdmin(ctx, func(c *pgx.Conn) error {
		var err error
		if d.ClockOffset, err = clockOffset(ctx, c); err != nil {
			return err
		}
		return dumpTables(ctx, c, d)
	})
	if err != nil {
		return nil, err
	}
	if err := h.readStamps(ctx, d); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(h.cfg.Dir, "dump.json"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	enc.SetIndent("", " ")
	return d, enc.Encode(d)
}

// clockOffset is the database's clock less this process's, from the
// sample with the shortest round trip.
func clockOffset(ctx context.Context, c *pgx.Conn) (int64, error) {
	best, offset := time.Hour, int64(0)
	for range 5 {
		t0 := time.Now()
		var db time.Time
		if err := c.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
			return 0, err
		}
		if rtt := time.Since(t0); rtt < best {
			best, offset = rtt, db.UnixNano()-t0.Add(rtt/2).UnixNano()
		}
	}
	return offset, nil
}

// collect scans every row of sql into a T.
func collect[T any](ctx context.Context, c *pgx.Conn, sql string, scan func(pgx.Rows, *T) error) ([]T, error) {
	rows, err := c.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("dump: %w", err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var x T
		if err := scan(rows, &x); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// Blobs belong to (project, tier): the key says where the bytes are.
const blobKeySQL = `(SELECT b.s3_key FROM blobs b WHERE (b.project_id, b.trusted, b.digest) = (t.project_id, t.trusted, t.digest))`

const (
	dumpRunsSQL     = `SELECT id, state FROM runs ORDER BY created_at`
	dumpJobsSQL     = `SELECT id, run_id, name, state, coalesce(reason, ''), generation FROM jobs ORDER BY created_at, id`
	dumpAttemptsSQL = `SELECT job_id, runner_id, lease_id::text, outcome, coalesce(reason, ''), generation, log_size, started_at, ended_at
		FROM job_attempts ORDER BY job_id, generation`
	dumpLogsSQL = `SELECT job_id, generation, array_agg(start_offset ORDER BY start_offset),
		       array_agg(length(data)::bigint ORDER BY start_offset), string_agg(data, ''::bytea ORDER BY start_offset)
		FROM log_chunks GROUP BY job_id, generation ORDER BY job_id, generation`
	dumpArtifactsSQL = `SELECT job_id, generation, name, digest, ` + blobKeySQL + ` FROM artifacts t ORDER BY job_id, generation, name`
	dumpPendingSQL   = `SELECT job_id, generation, key, digest, ` + blobKeySQL + ` FROM pending_caches t ORDER BY job_id, generation, key`
	dumpCachesSQL    = `SELECT coalesce(job_id, ''), 0, key, digest, ` + blobKeySQL + ` FROM caches t ORDER BY key`
	dumpAuditSQL     = `SELECT seq, at, expires, kind, coalesce(job_id, ''), coalesce(old_state, ''), coalesce(new_state, ''),
		       coalesce(lease_id, ''), coalesce(runner_id, ''), coalesce(detail, ''), coalesce(generation, 0), ok
		FROM chaos_audit ORDER BY seq`
)

// dumpTables reads the rows the checker judges.
func dumpTables(ctx context.Context, c *pgx.Conn, d *Dump) error {
	var err error
	scanBlob := func(r pgx.Rows, x *DumpBlob) error {
		return r.Scan(&x.JobID, &x.Generation, &x.Name, &x.Digest, &x.Key)
	}
	steps := []func() error{
		func() (err error) {
			d.Runs, err = collect(ctx, c, dumpRunsSQL, func(r pgx.Rows, x *DumpRun) error { return r.Scan(&x.ID, &x.State) })
			return err
		},
		func() (err error) {
			d.Jobs, err = collect(ctx, c, dumpJobsSQL, func(r pgx.Rows, x *DumpJob) error {
				return r.Scan(&x.ID, &x.RunID, &x.Name, &x.State, &x.Reason, &x.Generation)
			})
			return err
		},
		func() (err error) { d.Attempts, err = collect(ctx, c, dumpAttemptsSQL, scanAttempt); return err },
		func() (err error) { d.Logs, err = collect(ctx, c, dumpLogsSQL, scanLog); return err },
		func() (err error) { d.Artifacts, err = collect(ctx, c, dumpArtifactsSQL, scanBlob); return err },
		func() (err error) { d.Pending, err = collect(ctx, c, dumpPendingSQL, scanBlob); return err },
		func() (err error) { d.Caches, err = collect(ctx, c, dumpCachesSQL, scanBlob); return err },
		func() (err error) { d.Audit, err = collect(ctx, c, dumpAuditSQL, scanAudit); return err },
	}
	for _, step := range steps {
		if err = step(); err != nil {
			return err
		}
	}
	return nil
}

func scanAttempt(r pgx.Rows, x *DumpAttempt) error {
	var s, e time.Time
	err := r.Scan(&x.JobID, &x.RunnerID, &x.LeaseID, &x.Outcome, &x.Reason, &x.Generation, &x.LogSize, &s, &e)
	x.Started, x.Ended = s.UnixNano(), e.UnixNano()
	return err
}

func scanLog(r pgx.Rows, x *DumpLog) error {
	var starts, lens []int64
	var data []byte
	err := r.Scan(&x.JobID, &x.Generation, &starts, &lens, &data)
	for i := range starts {
		x.Chunks = append(x.Chunks, [2]int64{starts[i], lens[i]})
	}
	x.Data = string(data)
	return err
}

func scanAudit(r pgx.Rows, x *DumpAudit) error {
	var at time.Time
	var exp *time.Time
	err := r.Scan(&x.Seq, &at, &exp, &x.Kind, &x.JobID, &x.OldState, &x.NewState, &x.LeaseID, &x.RunnerID,
		&x.Detail, &x.Generation, &x.OK)
	x.At = at.UnixNano()
	if exp != nil {
		x.Expires = exp.UnixNano()
	}
	return err
}

// readStamps reads what each artifact's blob holds, from S3 directly
// (not through the fault proxy).
func (h *Harness) readStamps(ctx context.Context, d *Dump) error {
	direct := h.cfg.S3
	direct.Bucket = h.bucket
	plain, err := cas.New(ctx, direct)
	if err != nil {
		return err
	}
	tmp := filepath.Join(h.cfg.Dir, "artifacts")
	for i := range d.Artifacts {
		a := &d.Artifacts[i]
		if a.Stamp, err = readStamp(ctx, plain, a.Key, a.Digest, filepath.Join(tmp, fmt.Sprint(i))); err != nil {
			a.BlobErr = err.Error()
		}
	}
	return nil
}

// readStamp fetches a blob, checks it against its digest and returns the
// content of dist/stamp in it.
func readStamp(ctx context.Context, blobs *cas.Store, key, digest, dir string) (string, error) {
	body, _, err := blobs.Open(ctx, key)
	if err != nil {
		return "", err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		return "", fmt.Errorf("blob %s hashes to %s", digest, got)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := snapshot.Extract(bytes.NewReader(b), dir, snapshot.Limits{}); err != nil {
		return "", err
	}
	stamp, err := os.ReadFile(filepath.Join(dir, "dist", "stamp"))
	return strings.TrimSpace(string(stamp)), err
}

// LoadDump reads a dump written by a run.
func LoadDump(path string) (*Dump, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dump
	return &d, json.Unmarshal(b, &d)
}
