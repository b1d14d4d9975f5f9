package store

// The statements of the runs aggregate (runs.go and runs_advance.go).

// numberRunSQL takes project $1's next run number (and holds the project
// row until the run commits, so numbers follow commit order per project).
const numberRunSQL = `UPDATE projects SET next_run_number = next_run_number + 1 WHERE id = $1 RETURNING next_run_number`

// actorApprovedSQL asks whether actor $2 was approved in project $1 once.
const actorApprovedSQL = `SELECT EXISTS (SELECT 1 FROM approved_actors WHERE project_id = $1 AND actor = $2)`

const insertRunSQL = `
INSERT INTO runs (id, project_id, number, trigger, git_sha, git_ref, git_dirty,
                  source_digest, manifest_digest, source_size, trusted, scope, base_ref, actor, approval,
                  workflow, head_ref, concurrency_group, concurrency_cancel, inputs, concurrency_spec, event_at, source_by, retried_by,
                  source_token, inputs_token, run_name, run_name_spec, vars)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), $7, nullif($8, ''), nullif($9, ''), $10, $11,
        $12, nullif($13, ''), $14, $15, nullif($16, ''), nullif($17, ''), nullif($18, ''), $19, $20, $21, $22, nullif($23, ''),
        nullif($24, ''), nullif($25, ''), nullif($26, ''), nullif($27, ''), nullif($28, ''), $29)`

// concurrencySpecSQL reads run $1's concurrency as its pipeline says it.
const concurrencySpecSQL = `SELECT concurrency_spec FROM runs WHERE id = $1`

// insertJobSQL inserts a job PENDING: advanceRun queues it when its needs
// have passed. project_id and trusted are copies of its run's, for the
// claim's scan.
const insertJobSQL = `
INSERT INTO jobs (id, run_id, name, state, needs, labels, spec, timeout_seconds, retry_lease_lost,
                  retry_failed, secret_names, reason, project_id, trusted, features,
                  job_group, condition, condition_status, survives_cancel, continue_on_error,
                  fail_fast, max_parallel, reads_needs, concurrency_template, concurrency_cancel,
                  concurrency_cancel_expr, environment_template)
VALUES ($1, $2, $3, 'PENDING', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
        $15, $16, $17, $18, $19, $20, $21, $22, nullif($23, ''), $24, nullif($25, ''), nullif($26, ''))`

// insertJobCheckSQL is the check-run outbox row mirroring a new job.
const insertJobCheckSQL = `INSERT INTO check_runs (job_id, repository_id, head_sha, name) VALUES ($1, $2, $3, $4)`

// runStateSQL reads what the database set on a new run.
const runStateSQL = `SELECT state, created_at FROM runs WHERE id = $1`

// runColumns are the columns scanRun reads, from runs r joined to projects
// p (a fragment of the statements below, joined at compile time);
// runListColumns the same without the run's variables (NULL): a page of
// runs does not carry each one's 256 KiB of them.
const (
	runColumns     = runColumnsBase + `, r.vars`
	runListColumns = runColumnsBase + `, NULL::jsonb`
	runColumnsBase = `r.id, r.project_id, p.name, r.number, r.state, r.trigger, coalesce(r.git_sha, ''),
	coalesce(r.git_ref, ''), r.git_dirty, coalesce(r.source_digest, ''), coalesce(r.manifest_digest, ''),
	coalesce(r.source_size, 0), r.trusted, r.scope, coalesce(r.base_ref, ''), r.actor, r.approval,
	coalesce(r.approval_by, ''), r.approval_at, r.created_at, r.started_at, r.finished_at,
	coalesce(r.workflow, ''), coalesce(r.head_ref, ''), coalesce(r.concurrency_group, ''), r.concurrency_waiting,
	r.concurrency_cancel, r.inputs, coalesce(r.source_by, ''), coalesce(r.retried_by, ''), coalesce(r.source_token, ''),
	coalesce(r.inputs_token, ''), coalesce(r.run_name, ''), coalesce(r.run_name_spec, '')`
)

const getRunSQL = `SELECT ` + runColumns + `
FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1`

// getRunAsSQL is getRunSQL for user $2: a run they cannot read is not found.
const getRunAsSQL = `SELECT ` + runColumns + `
FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1 AND project_rank($2, r.project_id) >= 1`

// listRunsSQL is a page of the runs user $4 may read, newest first: of
// project $1 (a name or an ID; empty for all), before run $2 (the
// cursor; empty for the first page), at most $3; of branch or ref $5,
// state $6 and a trigger that starts with $7 (each empty for any).
const listRunsSQL = `
SELECT ` + runListColumns + `
FROM runs r JOIN projects p ON p.id = r.project_id
WHERE ($1 = '' OR p.name = $1 OR p.id = $1)
  AND ($2 = '' OR (r.created_at, r.id) < (SELECT b.created_at, b.id FROM runs b
                                           WHERE b.id = $2 AND project_rank($4, b.project_id) >= 1))
  AND project_rank($4, r.project_id) >= 1
  AND ($5 = '' OR r.git_ref = $5 OR r.git_ref = 'refs/heads/' || $5)
  AND ($6 = '' OR r.state = $6)
  AND ($7 = '' OR starts_with(r.trigger, $7))
ORDER BY r.created_at DESC, r.id DESC LIMIT $3`

// retryJobsSQL reads the jobs of run $1 (or only job $2) as a retry
// creates them again.
const retryJobsSQL = `
SELECT name, needs, labels, spec, timeout_seconds, retry_lease_lost, retry_failed,
       coalesce(job_group, ''), coalesce(condition, ''), continue_on_error, fail_fast, max_parallel, reads_needs,
       coalesce(concurrency_template, ''), concurrency_cancel, coalesce(concurrency_cancel_expr, '')
FROM jobs WHERE run_id = $1 AND ($2 = '' OR id = $2) ORDER BY created_at, id`

// Moving a run on (runs_advance.go).

// lockRunSQL takes the run row's lock (see advanceRun for the order).
const lockRunSQL = `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`

// A need "passed" when it is PASSED, or FAILED with continue-on-error
// (its dependants see a success, as GitHub's).
//
// skipDoomedSQL makes SKIPPED, transitively, the pending jobs of run $1
// that need a job which did not pass, unless their condition calls a
// status function: that condition decides instead (decide.go).
const skipDoomedSQL = `
WITH RECURSIVE doomed (id, name) AS (
    SELECT d.id, d.name FROM jobs d
    WHERE d.run_id = $1 AND d.state = 'PENDING' AND NOT d.condition_status
      AND EXISTS (SELECT 1 FROM jobs n WHERE n.run_id = d.run_id AND n.name = ANY (d.needs)
                  AND (n.state IN ('CANCELED', 'ABORTED', 'SKIPPED') OR n.state = 'FAILED' AND NOT n.continue_on_error))
  UNION
    SELECT d.id, d.name FROM jobs d JOIN doomed x ON x.name = ANY (d.needs)
    WHERE d.run_id = $1 AND d.state = 'PENDING' AND NOT d.condition_status
)
UPDATE jobs SET state = 'SKIPPED', reason = 'need_not_passed', finished_at = now()
WHERE id IN (SELECT id FROM doomed) AND state = 'PENDING'`

// queueReadySQL queues the pending jobs of run $1 whose needs all passed
// and that have nothing left to decide (no condition or reading of needs,
// or decided), unless the run waits for approval; of a matrix with
// max-parallel, only as many as leave at most that many queued or running
// (in the order of the matrix).
const queueReadySQL = `
WITH ready AS (
    SELECT d.id, d.max_parallel,
           row_number() OVER (PARTITION BY d.job_group ORDER BY d.id) AS nth,
           (SELECT count(*) FROM jobs s WHERE s.run_id = $1 AND s.job_group = d.job_group
                                         AND s.state IN ('QUEUED', 'RUNNING')) AS active
    FROM jobs d
    WHERE d.run_id = $1 AND d.state = 'PENDING'
      AND (d.decided OR d.condition IS NULL AND NOT d.reads_needs AND d.concurrency_template IS NULL
           AND d.environment_template IS NULL)
      AND NOT d.concurrency_waiting
      AND NOT EXISTS (SELECT 1 FROM jobs n WHERE n.run_id = d.run_id AND n.name = ANY (d.needs)
                      AND n.state <> 'PASSED' AND NOT (n.state = 'FAILED' AND n.continue_on_error)
                      AND NOT d.decided)
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = $1 AND (r.approval = 'pending' OR r.concurrency_waiting))
)
UPDATE jobs d SET state = 'QUEUED', queued_at = now()
FROM ready
WHERE d.id = ready.id AND (ready.max_parallel = 0 OR ready.nth + ready.active <= ready.max_parallel)`

// deriveRunStateSQL derives run $1's state and times from its jobs, and
// writes the run row only when they change.
const deriveRunStateSQL = `
WITH c AS (
    SELECT count(*) FILTER (WHERE state IN ('PENDING', 'QUEUED', 'RUNNING')) AS open,
           count(*) FILTER (WHERE state = 'RUNNING' OR started_at IS NOT NULL) AS started,
           count(*) FILTER (WHERE state = 'FAILED' AND NOT continue_on_error) AS failed,
           count(*) FILTER (WHERE state = 'ABORTED') AS aborted,
           count(*) FILTER (WHERE state = 'CANCELED') AS canceled
    FROM jobs WHERE run_id = $1
), n AS (
    SELECT CASE
               WHEN c.open > 0 AND c.started > 0 THEN 'RUNNING'
               WHEN c.open > 0 THEN 'PENDING'
               WHEN c.failed > 0 THEN 'FAILED'
               WHEN c.aborted > 0 THEN 'ABORTED'
               WHEN c.canceled > 0 THEN 'CANCELED'
               ELSE 'PASSED' END AS state,
           CASE WHEN c.started > 0 THEN coalesce(r.started_at, now()) ELSE r.started_at END AS started_at,
           CASE WHEN c.open = 0 THEN coalesce(r.finished_at, now()) END AS finished_at
    FROM c, runs r WHERE r.id = $1
)
UPDATE runs r SET state = n.state, started_at = n.started_at, finished_at = n.finished_at
FROM n
WHERE r.id = $1 AND (r.state, r.started_at, r.finished_at) IS DISTINCT FROM (n.state, n.started_at, n.finished_at)`

// cancelTargetsExistSQL asks whether run $1 has jobs (or job $2, when not
// empty).
const cancelTargetsExistSQL = `SELECT EXISTS (SELECT 1 FROM jobs WHERE run_id = $1 AND ($2 = '' OR id = $2))`

// lockCancelTargetsSQL locks the queued and running jobs a cancel
// touches, in ID order (see Cancel for the lock order).
const lockCancelTargetsSQL = `
SELECT id FROM jobs WHERE run_id = $1 AND ($2 = '' OR id = $2) AND state IN ('QUEUED', 'RUNNING')
ORDER BY id FOR UPDATE`

// cancelWaitingSQL cancels the jobs of run $1 (or job $2) not yet running;
// a run's cancel leaves those whose condition calls always() or
// cancelled() to it (they run after the canceled jobs, as GitHub's),
// unless the run still waits for approval or for its concurrency group:
// then nothing has run, and nothing may.
const cancelWaitingSQL = `
UPDATE jobs SET state = 'CANCELED', reason = 'canceled', finished_at = now()
WHERE run_id = $1 AND ($2 = '' OR id = $2) AND state IN ('PENDING', 'QUEUED')
  AND ($2 <> '' OR NOT survives_cancel
       OR EXISTS (SELECT 1 FROM runs r WHERE r.id = $1 AND (r.approval = 'pending' OR r.concurrency_waiting)))`

// askCancelSQL asks the runners of the running jobs of run $1 (or job $2)
// to stop: they hear it on their next heartbeat.
const askCancelSQL = `
UPDATE jobs SET cancel_requested = true
WHERE run_id = $1 AND ($2 = '' OR id = $2) AND state = 'RUNNING'`

// cancelRunSQL marks run $1 canceled as a whole: no retry policy re-queues
// its jobs, and its running jobs hear it on their heartbeats.
const cancelRunSQL = `UPDATE runs SET cancel_requested = true WHERE id = $1`

// lockApprovalSQL locks run $1 and reads what an approval decision checks.
const lockApprovalSQL = `SELECT approval, actor, state FROM runs WHERE id = $1 FOR UPDATE`

// lockProjectRunsSQL takes project $1's row as numbering a run does
// (numberRunSQL), before an approval locks any run: a run of the author
// made meanwhile is then either made after the approval commits, and
// does not wait, or before the approval looks for the author's waiting
// runs, and is released with them.
const lockProjectRunsSQL = `SELECT 1 FROM projects WHERE id = $1 FOR NO KEY UPDATE`

// actorWaitingSQL locks actor $2's runs in project $1, other than $3, that
// still wait for approval; one locked by another decision (a rejection,
// a cancel: approvals take the project's row first, lockProjectRunsSQL)
// is skipped and left to it.
const actorWaitingSQL = `
SELECT id FROM runs WHERE project_id = $1 AND actor = $2 AND id <> $3 AND approval = 'pending' AND finished_at IS NULL
ORDER BY id FOR UPDATE SKIP LOCKED`

const recordDecisionSQL = `UPDATE runs SET approval = $2, approval_by = $3, approval_at = now() WHERE id = $1`

// approveActorSQL remembers actor $2 as approved in project $1 (by $3, at
// run $4): their later untrusted runs start at once.
const approveActorSQL = `
INSERT INTO approved_actors (project_id, actor, approved_by, run_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (project_id, actor) DO NOTHING`

// releaseApprovedSQL clears the waiting reason ($2) of run $1's pending
// jobs; advanceRun then queues those ready.
const releaseApprovedSQL = `UPDATE jobs SET reason = NULL WHERE run_id = $1 AND state = 'PENDING' AND reason = $2`

// trustedRunOfCommitSQL says whether project $1 has a trusted run of
// snapshot $2 at commit $3 (trustedSpeaks; the snapshot narrows it to an
// index).
const trustedRunOfCommitSQL = `
SELECT EXISTS (SELECT 1 FROM runs WHERE project_id = $1 AND trusted AND source_digest = $2 AND git_sha = $3)`

// insertApprovedChecksSQL mirrors to check runs the jobs of approved run
// $1 that had none: while it waited, only its first job had one (see
// insertJobs); none if a trusted run of its commit came meanwhile
// (trustedSpeaks).
const insertApprovedChecksSQL = `
INSERT INTO check_runs (job_id, repository_id, head_sha, name)
SELECT j.id, c.repository_id, c.head_sha, j.name
FROM jobs j, (SELECT repository_id, head_sha FROM check_runs
              WHERE job_id IN (SELECT id FROM jobs WHERE run_id = $1) LIMIT 1) c
WHERE j.run_id = $1
  AND NOT EXISTS (SELECT 1 FROM runs r JOIN runs t ON t.project_id = r.project_id AND t.trusted
                  AND t.source_digest = r.source_digest AND t.git_sha = r.git_sha
                  WHERE r.id = $1 AND NOT r.trusted)
ON CONFLICT (job_id) DO NOTHING`

// releaseRejectedSourceSQL lets go of rejected run $1's snapshot: it
// never ran, and a stranger's pull request should not hold, for the
// project's retention, a snapshot per commit pushed while it waited (a
// newer commit rejects the older waiting run), in the quarter of the
// storage quota untrusted work shares. The collector then takes the blob
// once nothing else holds it.
const releaseRejectedSourceSQL = `
UPDATE runs SET source_digest = NULL, manifest_digest = NULL, source_size = NULL
WHERE id = $1 AND approval = 'rejected'`

// cancelRejectedSQL cancels the pending jobs of rejected run $1, saying
// by whom ($2).
const cancelRejectedSQL = `
UPDATE jobs SET state = 'CANCELED', reason = 'rejected by ' || $2, finished_at = now()
WHERE run_id = $1 AND state = 'PENDING'`
