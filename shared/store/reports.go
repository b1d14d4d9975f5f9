package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/mask"
	"github.com/forgeci/forgeci/shared/protocol"
)

// Test reports: a runner sends the summary of a job's reports: junit
// files under its lease (SetReport); people read it (ReportAs), the run
// view shows its counts, and the GitHub check run carries it.

// setReportSQL records attempt ($1, $2)'s summary $8 with its counts.
const setReportSQL = `
INSERT INTO job_reports (job_id, generation, tests, passed, failed, errored, skipped, summary)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (job_id, generation) DO UPDATE SET tests = excluded.tests, passed = excluded.passed,
    failed = excluded.failed, errored = excluded.errored, skipped = excluded.skipped,
    summary = excluded.summary, created_at = now()`

// reportSQL reads attempt ($1, $2)'s summary.
const reportSQL = `SELECT summary FROM job_reports WHERE job_id = $1 AND generation = $2`

// SetReport records the summary of the test reports of the attempt the
// lease holds, checked whole in the same transaction. Its text is masked
// with the job's secrets before it is stored, as a reason is: the GitHub
// check run shows it too, and a runner may not have masked it.
func (s *Store) SetReport(ctx context.Context, runnerID, jobID string, l domain.Lease, sum protocol.TestSummary) error {
	// The lease first: the job's secrets are opened (KMS) only for the
	// runner that holds it, and a stale lease hears so, not "try again".
	if _, err := s.CheckLease(ctx, runnerID, jobID, l); err != nil {
		return err
	}
	m, err := s.jobMask(ctx, jobID)
	if err != nil {
		return domain.Errorf(domain.EUnavailable, "the job's secrets cannot be opened now to mask its test report: send it again later")
	}
	sum = maskedReport(m, sum)
	body, err := json.Marshal(sum)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return s.withLease(ctx, runnerID, jobID, l, func(tx pgx.Tx, job *LeasedJob) error {
		_, err := tx.Exec(ctx, setReportSQL, job.ID, job.Generation, sum.Tests, sum.Passed, sum.Failed, sum.Errored, sum.Skipped, body)
		if err != nil {
			return fmt.Errorf("record report: %w", err)
		}
		return nil
	})
}

// ReportAs returns the test report summary of attempt generation (0: the
// current one) of a job u may read (any other is ENotFound), its text
// masked as the job's log is; ENotFound when the attempt sent none.
func (s *Store) ReportAs(ctx context.Context, u User, runID, jobID string, generation int) (protocol.TestSummary, int, error) {
	var sum protocol.TestSummary
	job, err := s.logJob(ctx, &u, runID, jobID, generation, 0)
	if err != nil {
		return sum, 0, err
	}
	m, err := s.logMask(ctx, job.projectID, job.trusted, job.secretNames)
	if err != nil {
		return sum, 0, err
	}
	err = s.pool.QueryRow(ctx, reportSQL, jobID, job.generation).Scan(&sum)
	if errors.Is(err, pgx.ErrNoRows) {
		return sum, 0, domain.Errorf(domain.ENotFound, "attempt %d of job %s sent no test report", job.generation, jobID)
	}
	if err != nil {
		return sum, 0, fmt.Errorf("report: %w", err)
	}
	return maskedReport(m, sum), job.generation, nil
}

// maskedReport is sum with its text masked by m (nil: none).
func maskedReport(m *mask.Set, sum protocol.TestSummary) protocol.TestSummary {
	sum.Failures = slices.Clone(sum.Failures)
	for i, f := range sum.Failures {
		f.Suite, f.Class, f.Name = m.String(f.Suite), m.String(f.Class), m.String(f.Name)
		f.Message, f.Text, f.File = m.String(f.Message), m.String(f.Text), m.String(f.File)
		sum.Failures[i] = f
	}
	return sum
}
