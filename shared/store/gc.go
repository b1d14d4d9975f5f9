package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The garbage collector keeps storage flat: runs (with their jobs, logs,
// attempts and artifacts) past their project's retention, finished webhook
// deliveries past a month, caches not restored for a week or beyond their
// project's quota (least recently restored first), uploads never committed
// after a day, and then every blob nothing references. It works in bounded
// batches, each its own short transaction, so a scheduled invocation can
// stop at any point and the next one carries on.

// unreferencedSQL is the condition "nothing references blob b".
const unreferencedSQL = `
	NOT EXISTS (SELECT 1 FROM runs r WHERE r.project_id = b.project_id AND r.trusted = b.trusted AND r.source_digest = b.digest)
	AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE (a.project_id, a.trusted, a.digest) = (b.project_id, b.trusted, b.digest))
	AND NOT EXISTS (SELECT 1 FROM caches c WHERE (c.project_id, c.trusted, c.digest) = (b.project_id, b.trusted, b.digest))
	AND NOT EXISTS (SELECT 1 FROM pending_caches p WHERE (p.project_id, p.trusted, p.digest) = (b.project_id, b.trusted, b.digest))`

// expireRunsSQL locks up to $1 finished runs past their project's
// retention, oldest first; a run a schedule fires again is kept.
const expireRunsSQL = `
SELECT r.id FROM runs r JOIN projects p ON p.id = r.project_id
WHERE r.finished_at < now() - make_interval(days => p.retention_days)
  AND NOT EXISTS (SELECT 1 FROM schedules s WHERE s.template_run_id = r.id)
ORDER BY r.finished_at LIMIT $1 FOR UPDATE OF r SKIP LOCKED`

// deleteRunAttemptsSQL deletes the attempts of runs $1 (they have no
// foreign key to cascade from).
const deleteRunAttemptsSQL = `DELETE FROM job_attempts a USING jobs j WHERE j.id = a.job_id AND j.run_id = ANY ($1)`

// deleteRunsSQL deletes runs $1 with their jobs and, by cascade, their
// logs, artifacts, pending caches and check runs.
const deleteRunsSQL = `DELETE FROM runs WHERE id = ANY ($1)`

// expireDeliveriesSQL deletes up to $1 deliveries finished more than $2
// seconds ago.
const expireDeliveriesSQL = `
DELETE FROM scm_deliveries WHERE guid IN (
    SELECT guid FROM scm_deliveries WHERE finished_at < now() - make_interval(secs => $2)
    ORDER BY finished_at LIMIT $1 FOR UPDATE SKIP LOCKED)`

// forgetPushBodiesSQL forgets up to $1 push bodies remembered more than
// $2 seconds (PushMemory).
const forgetPushBodiesSQL = `
DELETE FROM scm_push_bodies WHERE (repository_id, body_sha256) IN (
    SELECT repository_id, body_sha256 FROM scm_push_bodies WHERE received_at < now() - make_interval(secs => $2)
    ORDER BY received_at LIMIT $1 FOR UPDATE SKIP LOCKED)`

// dropPendingCachesSQL deletes up to $1 staged cache saves of attempts
// that ended.
const dropPendingCachesSQL = `
DELETE FROM pending_caches WHERE (job_id, generation, key) IN (
    SELECT p.job_id, p.generation, p.key FROM pending_caches p JOIN jobs j ON j.id = p.job_id
    WHERE j.generation <> p.generation OR j.state NOT IN ('QUEUED', 'RUNNING')
    LIMIT $1)`

// evictIdleCachesSQL deletes up to $1 cache entries not restored for $2
// seconds.
const evictIdleCachesSQL = `
DELETE FROM caches WHERE ctid IN (
    SELECT ctid FROM caches WHERE last_used_at < now() - make_interval(secs => $2) LIMIT $1)`

// evictOverQuotaSQL deletes up to $1 cache entries past their project's
// cache quota, counting the trusted tier's first and in each tier the most
// recently restored first: a fork's busy caches never push out the
// trusted ones (they go first instead).
const evictOverQuotaSQL = `
DELETE FROM caches WHERE ctid IN (
    SELECT ranked.ctid FROM (` + cachesKeptSQL + `) ranked
    WHERE ranked.kept > ranked.quota LIMIT $1)`

// cachesKeptSQL is each cache entry (ctid) with its project's cache quota
// and the bytes kept up to it in that order (the collector's and its dry
// run's).
const cachesKeptSQL = `
SELECT c.ctid, p.cache_quota_bytes AS quota,
       sum(c.size) OVER (PARTITION BY c.project_id ORDER BY c.trusted DESC, c.last_used_at DESC, c.key) AS kept
FROM caches c JOIN projects p ON p.id = c.project_id`

// staleUploadsSQL locks up to $1 uploads handed out more than $2 seconds
// ago.
const staleUploadsSQL = `
SELECT u.s3_key FROM uploads u WHERE u.created_at < now() - make_interval(secs => $2)
ORDER BY u.created_at LIMIT $1 FOR UPDATE SKIP LOCKED`

// lockUploadsSQL is, of upload keys $1, those whose lock it takes
// (pg_try_advisory_xact_lock of lockKeySQL's lock), each with whether a blob
// row holds it: one statement for a batch, not two round trips a key.
const lockUploadsSQL = `
WITH locked AS (
    SELECT k FROM unnest($1::text[]) k WHERE pg_try_advisory_xact_lock(7419, hashtext(k))
)
SELECT k, EXISTS (SELECT 1 FROM blobs b WHERE b.s3_key = k) FROM locked`

const forgetUploadsSQL = `DELETE FROM uploads WHERE s3_key = ANY ($1)`

// queueObjectsSQL queues objects $1 (of projects $2, tiers $3) of dropped
// blobs for deletion: as uploads handed out long ago (queuedAge) and never
// committed. Each in its tier, which counts it while it waits (an upload
// of the same key asked for meanwhile takes the row).
const queueObjectsSQL = `
INSERT INTO uploads (s3_key, project_id, trusted, created_at)
SELECT k, p, t, 'epoch' FROM unnest($1::text[], $2::text[], $3::boolean[]) AS q (k, p, t)
ON CONFLICT (s3_key) DO NOTHING`

// queuedAge selects the queued objects (and no upload handed out in the
// last year) for dropUploads.
const queuedAge = 365 * 24 * time.Hour

// markBlobsSQL is the collector's mark: the keys of up to $1 blobs nothing
// references and nobody touched within $2 seconds.
const markBlobsSQL = `
SELECT coalesce(array_agg(b.s3_key), '{}') FROM (
    SELECT b.s3_key FROM blobs b
    WHERE b.touched_at < now() - make_interval(secs => $2) AND ` + unreferencedSQL + `
    ORDER BY b.touched_at LIMIT $1) b`

// lockBlobsSQL is the sweep: of the marked keys $1, those whose lock it
// takes (pg_try_advisory_xact_lock of lockKeySQL's lock) and whose blobs are
// still unreferenced and untouched within $2 seconds, rows locked.
const lockBlobsSQL = `
WITH locked AS (
    SELECT k FROM unnest($1::text[]) k WHERE pg_try_advisory_xact_lock(7419, hashtext(k))
)
SELECT b.project_id, b.trusted, b.digest, b.s3_key, b.size
FROM blobs b WHERE b.s3_key IN (SELECT k FROM locked)
  AND b.touched_at < now() - make_interval(secs => $2) AND ` + unreferencedSQL + `
FOR UPDATE OF b SKIP LOCKED`

// deleteBlobsSQL deletes the blobs ($1, $2, $3)[i].
const deleteBlobsSQL = `
DELETE FROM blobs b USING unnest($1::text[], $2::bool[], $3::text[]) AS g(p, t, d)
WHERE (b.project_id, b.trusted, b.digest) = (g.p, g.t, g.d)`

// GCOptions bound and tune one collection.
type GCOptions struct {
	Batch  int           // rows per transaction (default 200)
	Budget time.Duration // start no batch after this long (default 40 s)
	// DryRun counts what would go and deletes nothing.
	DryRun bool
	// The ages (defaults: uploads 1 day, blobs untouched 2 days, caches
	// unrestored 7 days, finished deliveries 30 days, runs waiting for
	// approval 30 days).
	UploadTTL, BlobGrace, CacheIdle, DeliveryTTL, ApprovalTTL time.Duration
}

// GCResult counts what a collection removed (or, dry, would remove).
type GCResult struct {
	// ApprovalsExpired: runs that waited for approval too long, rejected.
	ApprovalsExpired int   `json:"approvals_expired"`
	Runs             int   `json:"runs"`
	Deliveries       int   `json:"deliveries"`
	PushBodies       int   `json:"push_bodies"` // forgotten after PushMemory
	PendingCaches    int   `json:"pending_caches"`
	LogsCompacted    int   `json:"logs_compacted"` // ended attempts whose log chunks were merged
	CachesIdle       int   `json:"caches_idle"`
	CachesOverQuota  int   `json:"caches_over_quota"`
	Uploads          int   `json:"uploads"`
	Blobs            int   `json:"blobs"`
	BlobBytes        int64 `json:"blob_bytes"`
	// Done: nothing was left to collect when the collection ended.
	Done bool `json:"done"`
}

func (o *GCOptions) defaults() {
	if o.Batch <= 0 {
		o.Batch = 200
	}
	if o.Budget <= 0 {
		o.Budget = 40 * time.Second
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.UploadTTL, UploadLife}, {&o.BlobGrace, 48 * time.Hour}, {&o.CacheIdle, 7 * 24 * time.Hour},
		{&o.DeliveryTTL, 30 * 24 * time.Hour}, {&o.ApprovalTTL, 30 * 24 * time.Hour}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}

// gcStep is one kind of collection: a batch of at most n, returning how many
// it removed; fewer than n means it is done for now.
type gcStep struct {
	name  string
	count *int
	run   func(ctx context.Context, n int) (int, error)
}

// CollectGarbage runs the steps in order (blobs last, once what referenced
// them has gone), each in batches until it runs dry or the budget is spent.
func (s *Store) CollectGarbage(ctx context.Context, o GCOptions) (GCResult, error) {
	o.defaults()
	var res GCResult
	if o.DryRun {
		return s.gcPlan(ctx, o)
	}
	deadline := time.Now().Add(o.Budget)
	steps := []gcStep{
		{"approvals", &res.ApprovalsExpired, func(ctx context.Context, n int) (int, error) { return s.expireApprovals(ctx, n, o.ApprovalTTL) }},
		{"runs", &res.Runs, func(ctx context.Context, n int) (int, error) { return s.expireRuns(ctx, n) }},
		{"deliveries", &res.Deliveries, s.execStep(expireDeliveriesSQL, o.DeliveryTTL.Seconds())},
		{"push bodies", &res.PushBodies, s.execStep(forgetPushBodiesSQL, PushMemory.Seconds())},
		{"pending caches", &res.PendingCaches, s.execStep(dropPendingCachesSQL)},
		{"logs", &res.LogsCompacted, s.compactLogs},
		{"idle caches", &res.CachesIdle, s.execStep(evictIdleCachesSQL, o.CacheIdle.Seconds())},
		{"caches over quota", &res.CachesOverQuota, s.execStep(evictOverQuotaSQL)},
		{"uploads", &res.Uploads, func(ctx context.Context, n int) (int, error) { return s.dropUploads(ctx, n, o.UploadTTL) }},
		{"blobs", &res.Blobs, func(ctx context.Context, n int) (int, error) {
			k, bytes, err := s.dropBlobs(ctx, n, o.BlobGrace)
			res.BlobBytes += bytes
			return k, err
		}},
	}
	res.Done = true
	for _, st := range steps {
		for {
			if time.Now().After(deadline) || ctx.Err() != nil {
				res.Done = false
				return res, ctx.Err()
			}
			k, err := st.run(ctx, o.Batch)
			*st.count += k
			if err != nil {
				return res, fmt.Errorf("collect %s: %w", st.name, err)
			}
			if k < o.Batch {
				break
			}
		}
	}
	return res, nil
}

// expireRuns deletes finished runs past their project's retention, with
// their jobs (and, by cascade, logs, artifacts, pending caches and check
// runs) and their attempts, which have no foreign key.
func (s *Store) expireRuns(ctx context.Context, n int) (int, error) {
	return collectBatch(ctx, s, expireRunsSQL, []any{n}, pgx.RowTo[string], func(tx pgx.Tx, ids []string) (int, error) {
		if _, err := tx.Exec(ctx, deleteRunAttemptsSQL, ids); err != nil {
			return 0, err
		}
		tag, err := tx.Exec(ctx, deleteRunsSQL, ids)
		return int(tag.RowsAffected()), err
	})
}

// execStep is a collection step that is one statement: query takes the
// batch size, then args, and removes what it changes.
func (s *Store) execStep(query string, args ...any) func(ctx context.Context, n int) (int, error) {
	return func(ctx context.Context, n int) (int, error) {
		tag, err := s.pool.Exec(ctx, query, append([]any{n}, args...)...)
		return int(tag.RowsAffected()), err
	}
}

// collectBatch is a collection step in one transaction: query (given args)
// picks a batch, its rows read by scan, and remove removes it, answering
// how many it removed. An empty batch is left at that.
func collectBatch[T any](ctx context.Context, s *Store, query string, args []any, scan pgx.RowToFunc[T],
	remove func(tx pgx.Tx, batch []T) (int, error)) (int, error) {
	return inTxValue(ctx, s, func(tx pgx.Tx) (int, error) {
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		batch, err := pgx.CollectRows(rows, scan)
		if err != nil || len(batch) == 0 {
			return 0, err
		}
		return remove(tx, batch)
	})
}

// dropUploads removes the objects of uploads handed out more than ttl ago
// and never committed, under each key's lock (see blobs.go), and forgets
// the uploads that were committed.
func (s *Store) dropUploads(ctx context.Context, n int, ttl time.Duration) (int, error) {
	return collectBatch(ctx, s, staleUploadsSQL, []any{n, ttl.Seconds()}, pgx.RowTo[string], func(tx pgx.Tx, keys []string) (int, error) {
		var orphans, done []string
		rows, err := tx.Query(ctx, lockUploadsSQL, keys)
		if err != nil {
			return 0, err
		}
		var key string
		var held bool
		_, err = pgx.ForEachRow(rows, []any{&key, &held}, func() error {
			if !held {
				orphans = append(orphans, key)
			}
			done = append(done, key)
			return nil
		})
		if err != nil {
			return 0, err
		}
		if err := s.deleteObjects(ctx, orphans); err != nil {
			return 0, err
		}
		tag, err := tx.Exec(ctx, forgetUploadsSQL, done)
		return int(tag.RowsAffected()), err
	})
}

func (s *Store) deleteObjects(ctx context.Context, keys []string) error {
	if len(keys) == 0 || s.objects == nil {
		return nil
	}
	return s.objects.Delete(ctx, keys)
}

// dropBlobs removes blobs nothing references and nobody touched within
// grace. The mark is the first query; the sweep takes, for the whole batch
// at once, each object key's lock (skipping keys a registration holds) and
// each row's lock (skipping rows in use), re-checks under them that nothing
// references the blob (so no registration or reference can slip in
// between), deletes the rows and queues their objects, which go after the
// commit (dropUploads).
func (s *Store) dropBlobs(ctx context.Context, n int, grace time.Duration) (int, int64, error) {
	var k, queued int
	var freed int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var keys []string
		if err := tx.QueryRow(ctx, markBlobsSQL, n, grace.Seconds()).Scan(&keys); err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		// Locked and still unreferenced: the batch.
		rows, err := tx.Query(ctx, lockBlobsSQL, keys, grace.Seconds())
		if err != nil {
			return err
		}
		type cand struct {
			ref  BlobRef
			key  string
			size int64
		}
		gone, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cand, error) {
			var c cand
			return c, row.Scan(&c.ref.ProjectID, &c.ref.Trusted, &c.ref.Digest, &c.key, &c.size)
		})
		if err != nil || len(gone) == 0 {
			return err
		}
		var projects, digests, objects, owners []string
		var tiers, ownerTiers []bool
		for _, c := range gone {
			projects, tiers, digests = append(projects, c.ref.ProjectID), append(tiers, c.ref.Trusted), append(digests, c.ref.Digest)
			ownerTiers = append(ownerTiers, c.ref.Trusted)
			freed += c.size
			objects, owners = append(objects, c.key), append(owners, c.ref.ProjectID)
		}
		tag, err := tx.Exec(ctx, deleteBlobsSQL, projects, tiers, digests)
		if err != nil {
			return err
		}
		k = int(tag.RowsAffected())
		// The objects go after the commit, as uploads never committed do
		// (dropUploads, under each key's lock, unless a row holds the key:
		// a registration that took it again, or another (project, tier)
		// sharing a key from before keys were namespaced). Deleted first, a
		// failed commit would leave rows naming objects that are gone.
		// Every key is queued, even one another row held when the sweep
		// looked: its rows may all go in this batch.
		_, err = tx.Exec(ctx, queueObjectsSQL, objects, owners, ownerTiers)
		queued = len(objects)
		return err
	})
	if err != nil || queued == 0 {
		return k, freed, err
	}
	if _, err := s.dropUploads(ctx, queued, queuedAge); err != nil {
		return k, freed, fmt.Errorf("the objects of dropped blobs (queued for the next collection): %w", err)
	}
	return k, freed, nil
}
