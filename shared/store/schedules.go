package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/wake"
)

// Schedules (docs/pipeline.md, "Schedules"): a trusted run of a project's
// default branch made from a parsed pipeline replaces the project's
// schedules with its pipeline's on.schedule; FireSchedules, called every
// minute, fires each schedule's newest due slot, by the database's clock,
// as a run of that run's snapshot and jobs. Each (project, cron, slot)
// fires at most once: the firing row's primary key is inserted in the
// transaction that makes the run.

// cronParser reads the five-field crons the pipeline parser accepted.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// scheduleGrace is how late a slot may fire and still be on time: a slot
// later than that was missed (the control plane was down), and a schedule
// with missed: skip skips it.
const scheduleGrace = 5 * time.Minute

// maxCatchUp bounds how far back a schedule's slots are looked for.
const maxCatchUp = 7 * 24 * time.Hour

// setSchedulesSQL makes crons $4 (with missed $5) project $1's
// schedules, fired from run $3, made with API token $7 ("": none), when
// run $3's ref $2 is the project's default branch and the project is not
// on GitHub (whose worker sets them: repoSchedulesSQL): a cron kept keeps
// its creation time (a slot due meanwhile still fires), the others go. $6
// are new IDs.
const setSchedulesSQL = `
WITH d AS (
    SELECT 1 FROM projects p WHERE p.id = $1 AND 'refs/heads/' || p.default_branch = $2
      AND NOT EXISTS (SELECT 1 FROM scm_repositories r WHERE r.project_id = p.id)
), gone AS (
    DELETE FROM schedules WHERE project_id = $1 AND EXISTS (SELECT 1 FROM d) AND cron <> ALL ($4::text[])
)
INSERT INTO schedules (id, project_id, cron, missed, template_run_id, set_by_token)
SELECT x.id, $1, x.cron, x.missed, $3, nullif($7, '')
FROM unnest($6::text[], $4::text[], $5::text[]) AS x (id, cron, missed)
WHERE EXISTS (SELECT 1 FROM d)
ON CONFLICT (project_id, cron) DO UPDATE
SET missed = excluded.missed, template_run_id = excluded.template_run_id, set_by_token = excluded.set_by_token`

// repoSchedulesSQL makes crons $3 (missed $4) the schedules of GitHub
// project $1's repository $6, fired from ref $2 (its default branch) as
// GitHub resolves it then; they replace that repository's and any a CLI
// run set, not another repository's. $5 are new IDs.
const repoSchedulesSQL = `
WITH r AS (
    SELECT 1 FROM scm_repositories WHERE github_id = $6 AND project_id = $1
), gone AS (
    DELETE FROM schedules WHERE project_id = $1 AND EXISTS (SELECT 1 FROM r)
      AND (repository_id = $6 OR template_run_id IS NOT NULL) AND cron <> ALL ($3::text[])
)
INSERT INTO schedules (id, project_id, cron, missed, template_run_id, ref, repository_id)
SELECT x.id, $1, x.cron, x.missed, NULL, $2, $6
FROM unnest($5::text[], $3::text[], $4::text[]) AS x (id, cron, missed)
WHERE EXISTS (SELECT 1 FROM r)
ON CONFLICT (project_id, cron) DO UPDATE
SET missed = excluded.missed, template_run_id = NULL, ref = excluded.ref, repository_id = excluded.repository_id,
    set_by_token = NULL`

// SetRepoSchedules makes the schedules of the pipeline on repository
// repositoryID's default branch (ref, as a push to it or a firing found
// it) the repository's in project projectID. The GitHub worker calls it
// for every such push, whether it makes a run. The same cron in two
// repositories of a project is the one that set it last.
func (s *Store) SetRepoSchedules(ctx context.Context, projectID string, repositoryID int64, ref string, list []domain.Schedule) error {
	ids, crons, missed := scheduleColumns(list)
	// The sweeper fires schedules: it must look again to learn the next
	// slot (noted first, the statement bounded from the note).
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("schedules: %w", err)
	}
	defer conn.Release()
	started, err := s.mark(ctx, conn, false, wake.Sweep)
	if err != nil {
		return err
	}
	qctx, cancel := s.coveredBy(ctx, started)
	defer cancel()
	if _, err := conn.Exec(qctx, repoSchedulesSQL, projectID, ref, crons, missed, ids, repositoryID); err != nil {
		if s.board != nil {
			s.afterFailure(ctx, err, wake.Sweep, s.board.CommitDelay())
		}
		return fmt.Errorf("schedules: %w", err)
	}
	return nil
}

func scheduleColumns(list []domain.Schedule) (ids, crons, missed []string) {
	ids, crons, missed = make([]string, len(list)), make([]string, len(list)), make([]string, len(list))
	for i, s := range list {
		ids[i], crons[i], missed[i] = uuid.Must(uuid.NewV7()).String(), s.Cron, s.Missed
	}
	return ids, crons, missed
}

// setSchedules makes run's pipeline's schedules the project's, when run is
// a trusted run of the default branch, made with API token token ("":
// none), which must not be revoked: its revocation removes what it set
// (revokeTree), and this holds it until the commit.
func setSchedules(ctx context.Context, tx pgx.Tx, run *Run, token string, list []domain.Schedule) error {
	if list == nil || !run.Trusted || run.GitRef == "" {
		return nil
	}
	if err := holdUnrevokedToken(ctx, tx, token, "the run would set the pipeline's schedules, but it is made", "use a token that works"); err != nil {
		return err
	}
	ids, crons, missed := scheduleColumns(list)
	noteSweep(tx) // the sweeper fires schedules: it learns the next slot
	if _, err := tx.Exec(ctx, setSchedulesSQL, run.ProjectID, run.GitRef, run.ID, crons, missed, ids, token); err != nil {
		return fmt.Errorf("schedules: %w", err)
	}
	return nil
}

// schedulesDueSQL lists every schedule with the database's now and the
// newest slot fired (or skipped) for its cron.
const schedulesDueSQL = `
SELECT s.project_id, s.cron, s.missed, coalesce(s.template_run_id, ''), coalesce(s.ref, ''), coalesce(s.repository_id, 0),
       coalesce(s.set_by_token, ''), s.created_at, now(),
       (SELECT max(f.slot) FROM schedule_firings f WHERE f.project_id = s.project_id AND f.cron = s.cron)
FROM schedules s ORDER BY s.project_id, s.cron`

// claimSlotSQL records slot $3 of cron $2 of project $1 as fired (or
// skipped, $4, with note $5); no row when it already was.
const claimSlotSQL = `
INSERT INTO schedule_firings (project_id, cron, slot, skipped, note) VALUES ($1, $2, $3, $4, nullif($5, ''))
ON CONFLICT DO NOTHING RETURNING fired_at`

const firedRunSQL = `UPDATE schedule_firings SET run_id = $4 WHERE project_id = $1 AND cron = $2 AND slot = $3`

// ScheduleResult counts what one FireSchedules did, and the schedules it
// left for the next call (out of time).
type ScheduleResult struct {
	Fired, Skipped, Left int
	// Next is the earliest slot after now of any schedule (zero: none), when
	// FireSchedules must run again, on the caller's clock; now when some
	// were left.
	Next time.Time
}

// scheduleBudget bounds one FireSchedules (it runs in the sweeper's
// invocation, beside the lease expiry).
const scheduleBudget = 20 * time.Second

type dueSchedule struct {
	projectID, cron, missed, templateRun, ref string
	repositoryID                              int64
	token                                     string // set by a run made with it
	created, now                              time.Time
	last                                      *time.Time
}

// movedSchedulesSQL deletes the schedules of repositories linked to
// another project since they were set (a removed one's go with it).
const movedSchedulesSQL = `
DELETE FROM schedules s WHERE s.repository_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM scm_repositories r WHERE r.github_id = s.repository_id AND r.project_id = s.project_id)`

// FireSchedules fires every schedule's newest slot due by the database's
// clock that has not fired yet: once, even with several callers at once.
// A slot later than scheduleGrace was missed: it fires (once, however many
// slots were missed) under missed: run-once, and is recorded skipped under
// missed: skip.
func (s *Store) FireSchedules(ctx context.Context) (ScheduleResult, error) {
	var res ScheduleResult
	if _, err := s.pool.Exec(ctx, movedSchedulesSQL); err != nil {
		return res, fmt.Errorf("schedules: %w", err)
	}
	rows, err := s.pool.Query(ctx, schedulesDueSQL)
	if err != nil {
		return res, fmt.Errorf("schedules: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dueSchedule, error) {
		var d dueSchedule
		return d, row.Scan(&d.projectID, &d.cron, &d.missed, &d.templateRun, &d.ref, &d.repositoryID, &d.token, &d.created, &d.now, &d.last)
	})
	if err != nil {
		return res, fmt.Errorf("schedules: %w", err)
	}
	listed := s.clockNow() // when the database's now was read, on the caller's clock
	var errs []error
	start := time.Now()
	for i, d := range list {
		if ctx.Err() != nil || time.Since(start) > scheduleBudget {
			// The rest fire on the next call, late but once.
			res.Left = len(list) - i
			errs = append(errs, ctx.Err())
			break
		}
		fired, skipped, err := s.fireSchedule(ctx, d)
		res.Fired += fired
		res.Skipped += skipped
		errs = append(errs, err)
	}
	if res.Fired > 0 {
		s.signalQueued()
	}
	if res.Next = nextSlot(list, res.Left > 0); !res.Next.IsZero() {
		// On the caller's clock (see earliest): the slot is the database's.
		res.Next = listed.Add(res.Next.Sub(list[0].now))
	}
	if _, err := s.pool.Exec(ctx, pruneFiringsSQL); err != nil {
		errs = append(errs, fmt.Errorf("prune schedule firings: %w", err))
	}
	return res, errors.Join(errs...)
}

// pruneFiringsSQL deletes up to 1000 firings older than 30 days, but never
// a cron's newest (what its next slot is counted from).
const pruneFiringsSQL = `
DELETE FROM schedule_firings WHERE (project_id, cron, slot) IN (
    SELECT f.project_id, f.cron, f.slot FROM schedule_firings f
    WHERE f.fired_at < now() - interval '30 days'
      AND f.slot < (SELECT max(g.slot) FROM schedule_firings g WHERE g.project_id = f.project_id AND g.cron = f.cron)
    LIMIT 1000)`

// fireSchedule fires d's newest due slot, if any.
func (s *Store) fireSchedule(ctx context.Context, d dueSchedule) (fired, skipped int, err error) {
	slot, ok := dueSlot(d)
	if !ok {
		return 0, 0, nil
	}
	if d.missed == "skip" && d.now.Sub(slot) > scheduleGrace {
		_, err := s.claimSlot(ctx, s.pool, d, slot, true, fmt.Sprintf("missed by %s (missed: skip)", d.now.Sub(slot).Round(time.Second)))
		return 0, 1, err
	}
	var made Run
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		claimed, err := s.claimSlot(ctx, tx, d, slot, false, "")
		if err != nil || !claimed {
			return err
		}
		if d.templateRun == "" {
			if err := askGitHubWorker(ctx, tx, d, slot); err != nil {
				return err
			}
			fired = 1
			return nil
		}
		if err := holdUnrevokedToken(ctx, tx, d.token, "the schedule was set by a run made",
			"a trusted run of the default branch sets it again"); err != nil {
			return err
		}
		old, err := scanRun(tx.QueryRow(ctx, getRunSQL, d.templateRun))
		if err != nil {
			return fmt.Errorf("the schedule's run %s: %w", d.templateRun, err)
		}
		if err := authorStillMay(ctx, tx, old, "the schedule's run was made"); err != nil {
			return err
		}
		nr, err := copyRun(ctx, tx, old, "")
		if err != nil {
			return err
		}
		nr.Trigger, nr.Inputs = "schedule: "+d.cron, nil
		// The group as the pipeline says it, of this run's facts.
		var spec *domain.Concurrency
		if err := tx.QueryRow(ctx, concurrencySpecSQL, old.ID).Scan(&spec); err != nil {
			return fmt.Errorf("the schedule's run %s: %w", old.ID, err)
		}
		if spec != nil {
			nr.Concurrency = spec
		}
		run, err := s.createRunTx(ctx, tx, nr)
		if err != nil {
			return err
		}
		fired, made = 1, run
		_, err = tx.Exec(ctx, firedRunSQL, d.projectID, d.cron, slot, run.ID)
		return err
	})
	if err == nil && made.ID != "" {
		s.afterCreate(ctx, made)
	}
	if err != nil && permanentFiring(err) {
		// The slot is spent, and says why, rather than retried for ever
		// (a run that is gone, an author who may no longer run it). A
		// transient failure is left for the next sweep.
		_, serr := s.claimSlot(ctx, s.pool, d, slot, true, domain.Truncate("could not fire: "+err.Error(), 300))
		return 0, 1, serr
	}
	return fired, 0, err
}

// permanentFiring: the firing failed for a reason another try would meet
// again.
func permanentFiring(err error) bool {
	if errors.Is(err, pgx.ErrNoRows) {
		return true
	}
	switch domain.ErrorCode(err) {
	case domain.EInvalid, domain.ENotFound, domain.EForbidden, domain.EConflict, domain.EUnauthorized:
		return true
	}
	return false
}

func (s *Store) claimSlot(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, d dueSchedule, slot time.Time, skipped bool, note string) (bool, error) {
	var at time.Time
	err := q.QueryRow(ctx, claimSlotSQL, d.projectID, d.cron, slot, skipped, note).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("schedule slot: %w", err)
	}
	return true, nil
}

// nextSlot is the earliest slot after now of the schedules in list (all
// read at one database now), or now itself when some were left unfired.
func nextSlot(list []dueSchedule, left bool) time.Time {
	var next time.Time
	for _, d := range list {
		if left {
			return d.now
		}
		sched, err := cronParser.Parse(d.cron)
		if err != nil {
			continue
		}
		if t := sched.Next(d.now.UTC()); !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}

// dueSlot is the newest slot of d's cron at or before now, after the last
// one fired (or the schedule's creation), within maxCatchUp.
func dueSlot(d dueSchedule) (time.Time, bool) {
	sched, err := cronParser.Parse(d.cron)
	if err != nil {
		return time.Time{}, false
	}
	from := d.created
	if d.last != nil && d.last.After(from) {
		from = *d.last
	}
	if earliest := d.now.Add(-maxCatchUp); from.Before(earliest) {
		from = earliest
	}
	var due time.Time
	for t := sched.Next(from.UTC()); !t.IsZero() && !t.After(d.now); t = sched.Next(t) {
		due = t
	}
	return due, !due.IsZero()
}

// authorStillMay checks, when a run is started again (a schedule firing;
// a manual run, a retry or a schedule running a member's submitted
// snapshot), that the member old.Actor (what says what they did, for the
// error) may still start it: the write role, and for a trusted run the
// secrets permission. A run from a GitHub push has no member to ask: it
// is the repository's own ref.
func authorStillMay(ctx context.Context, tx pgx.Tx, old Run, what string) error {
	id, ok := strings.CutPrefix(old.Actor, "user:")
	if !ok {
		return nil
	}
	a, err := authorize(ctx, tx, User{ID: id}, old.ProjectID, RankWrite, "project "+old.Project)
	if err != nil {
		return domain.Errorf(domain.EForbidden, "%s by a member who may no longer start runs in %s (%v)", what, old.Project, err)
	}
	if old.Trusted && !a.Secrets {
		return domain.Errorf(domain.EForbidden, "%s by a member who no longer has the secrets permission in %s: submit it again", what, old.Project)
	}
	return nil
}

// EventSchedule is the event of a GitHub project's schedule firing: a
// delivery FireSchedules records for the GitHub worker, which resolves the
// schedule's ref as the App and makes the run.
const EventSchedule = "forgeci_schedule"

// ScheduleRequest is an EventSchedule delivery's payload.
type ScheduleRequest struct {
	ID   string    `json:"id"` // the delivery's GUID (deliveries are unique by body too)
	Cron string    `json:"cron"`
	Slot time.Time `json:"slot"`
	Ref  string    `json:"ref"`
}

// recordScheduleSQL records the EventSchedule delivery $1 for project
// $2's repository $6, and notes it on the firing.
const recordScheduleSQL = `
WITH d AS (
    INSERT INTO scm_deliveries (guid, event, repository_id, payload, body_sha256)
    SELECT $1, '` + EventSchedule + `', r.github_id, $3, sha256($3::bytea) FROM scm_repositories r
    WHERE r.github_id = $6 AND r.project_id = $2
    RETURNING guid
)
UPDATE schedule_firings SET note = 'delivery ' || (SELECT guid FROM d)
WHERE project_id = $2 AND cron = $4 AND slot = $5 AND EXISTS (SELECT 1 FROM d)`

// askGitHubWorker records, in the firing's transaction, the delivery that
// makes a GitHub project's scheduled run.
func askGitHubWorker(ctx context.Context, tx pgx.Tx, d dueSchedule, slot time.Time) error {
	guid := "schedule-" + uuid.Must(uuid.NewV7()).String()
	payload, _ := json.Marshal(ScheduleRequest{ID: guid, Cron: d.cron, Slot: slot, Ref: d.ref}) // strings and a time
	tag, err := tx.Exec(ctx, recordScheduleSQL, guid, d.projectID, payload, d.cron, slot, d.repositoryID)
	if err != nil {
		return fmt.Errorf("schedule delivery: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return domain.Errorf(domain.ENotFound, "the schedule's repository is not the project's any more")
	}
	return nil
}

// SetFiringRun records the run a GitHub project's schedule firing made
// (the worker made it after the firing committed).
func (s *Store) SetFiringRun(ctx context.Context, projectID string, req ScheduleRequest, runID string) error {
	_, err := s.pool.Exec(ctx, firedRunSQL, projectID, req.Cron, req.Slot, runID)
	return err
}
