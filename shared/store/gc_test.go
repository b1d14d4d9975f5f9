package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// gcEnv is a store with a real CAS, one project and a runner.
type gcEnv struct {
	t       *testing.T
	s       *store.Store
	cas     *cas.Store
	project store.Project
	runner  store.Runner
}

func newGCEnv(t *testing.T) *gcEnv {
	t.Helper()
	e := &gcEnv{t: t, s: pgtest.NewStore(t, store.Limits{}), cas: castest.New(t)}
	e.s.SetObjects(e.cas)
	e.project = pgtest.Project(t, e.s, "p")
	e.runner = newRunner(t, e.s)
	return e
}

func (e *gcEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.s.Pool().Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *gcEnv) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.s.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// put puts data into the project's trusted namespace, as an upload would.
func (e *gcEnv) put(data []byte) store.BlobRef {
	e.t.Helper()
	return e.putIn(true, data)
}

// putIn puts data into the project's namespace of the trusted tier, or
// the untrusted one.
func (e *gcEnv) putIn(trusted bool, data []byte) store.BlobRef {
	e.t.Helper()
	sum := sha256.Sum256(data)
	ref := store.BlobRef{ProjectID: e.project.ID, Trusted: trusted, Digest: "sha256:" + hex.EncodeToString(sum[:])}
	if err := e.cas.Put(context.Background(), ref.Key(), ref.Digest, bytes.NewReader(data), int64(len(data))); err != nil {
		e.t.Fatal(err)
	}
	return ref
}

// prepareErr is PrepareBlobUpload's error.
func prepareErr(_ bool, err error) error { return err }

func (e *gcEnv) present(key string) bool {
	_, _, err := e.cas.Stat(context.Background(), key)
	return err == nil
}

// job runs one job to the end: a log, an artifact and a cache save.
func (e *gcEnv) job(name string, artifact, cache []byte) string {
	e.t.Helper()
	ctx := context.Background()
	run, err := e.s.CreateRun(ctx, store.NewRun{Project: "p", Scope: "refs/heads/main", Jobs: []store.NewJob{{Name: name}}})
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := e.s.Claim(ctx, e.runner, nil, 0)
	if err != nil || c == nil {
		e.t.Fatalf("claim: %v", err)
	}
	l := c.Lease
	if _, err := e.s.AppendLog(ctx, e.runner.ID, l.JobID, l, 0, bytes.Repeat([]byte("log line\n"), 100)); err != nil {
		e.t.Fatal(err)
	}
	if artifact != nil {
		ref := e.put(artifact)
		if err := e.s.CommitArtifact(ctx, e.runner.ID, l.JobID, l, "dist", ref.Digest, int64(len(artifact))); err != nil {
			e.t.Fatal(err)
		}
	}
	if cache != nil {
		ref := e.put(cache)
		if err := e.s.CommitCache(ctx, e.runner.ID, l.JobID, l, name+"-cache", ref.Digest, int64(len(cache))); err != nil {
			e.t.Fatal(err)
		}
	}
	if _, err := e.s.Complete(ctx, e.runner.ID, l.JobID, l, domain.OutcomePassed, 0); err != nil {
		e.t.Fatal(err)
	}
	return run.ID
}

// TestCollectGarbage: a collection removes exactly what retention, cache
// idleness and quotas, stale uploads and unreferenced blobs say, objects
// with their rows, and a dry run counts the same without removing anything.
func TestCollectGarbage(t *testing.T) {
	e := newGCEnv(t)
	ctx := context.Background()
	old := e.job("old", []byte("old artifact"), []byte("old cache"))
	fresh := e.job("fresh", []byte("fresh artifact"), []byte("fresh cache"))
	e.exec(`UPDATE runs SET finished_at = now() - interval '91 days', created_at = now() - interval '92 days' WHERE id = $1`, old)
	e.exec(`UPDATE caches SET last_used_at = now() - interval '8 days' WHERE key = 'old-cache'`)
	// A stale upload never committed, and one just handed out.
	stale, recent := e.put([]byte("uploaded, never committed")), e.put([]byte("being uploaded now"))
	for _, ref := range []store.BlobRef{stale, recent} {
		if _, err := e.s.PrepareBlobUpload(ctx, ref, 20); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(`UPDATE uploads SET created_at = now() - interval '2 days' WHERE s3_key = $1`, stale.Key())
	// Blobs: old and unreferenced but touched yesterday stays.
	touched := e.put([]byte("told exists yesterday"))
	if err := e.s.RegisterBlob(ctx, touched, 21); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE blobs SET touched_at = now() - interval '3 days' WHERE s3_key <> $1`, touched.Key())
	e.exec(`UPDATE blobs SET touched_at = now() - interval '1 day' WHERE s3_key = $1`, touched.Key())

	plan, err := e.s.CollectGarbage(ctx, store.GCOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Runs != 1 || plan.CachesIdle != 1 || plan.Uploads != 1 || plan.PendingCaches != 2 || plan.Done {
		t.Fatalf("dry run: %+v", plan)
	}
	if n := e.count(`SELECT count(*) FROM runs`); n != 2 {
		t.Fatalf("a dry run removed runs: %d left", n)
	}
	res, err := e.s.CollectGarbage(ctx, store.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs != 1 || res.CachesIdle != 1 || res.Uploads != 1 || res.PendingCaches != 1 || res.Blobs != 2 || res.BlobBytes != 21 || !res.Done {
		t.Fatalf("collection: %+v", res)
	}
	// Gone: the old run's rows, its artifact's and cache's blobs and
	// objects, the stale upload's object. Kept: the rest.
	for sql, want := range map[string]int{
		`SELECT count(*) FROM runs WHERE id = '` + old + `'`:                                         0,
		`SELECT count(*) FROM jobs j JOIN runs r ON r.id = j.run_id WHERE r.id = '` + old + `'`:      0,
		`SELECT count(*) FROM job_attempts a LEFT JOIN jobs j ON j.id = a.job_id WHERE j.id IS NULL`: 0,
		`SELECT count(*) FROM log_chunks`:                                                            1,
		`SELECT count(*) FROM runs WHERE id = '` + fresh + `'`:                                       1,
		`SELECT count(*) FROM caches`:                                                                1,
		`SELECT count(*) FROM pending_caches`:                                                        0,
		`SELECT count(*) FROM uploads`:                                                               1,
		`SELECT count(*) FROM blobs`:                                                                 3,
	} {
		if got := e.count(sql); got != want {
			t.Errorf("%s: %d, want %d", sql, got, want)
		}
	}
	if e.present(stale.Key()) || !e.present(recent.Key()) || !e.present(touched.Key()) {
		t.Errorf("objects: stale upload %v, recent upload %v, touched blob %v", e.present(stale.Key()),
			e.present(recent.Key()), e.present(touched.Key()))
	}
	var fetched store.Blob
	if err := e.s.Pool().QueryRow(ctx, `SELECT b.s3_key FROM artifacts a JOIN blobs b USING (project_id, trusted, digest)`).Scan(&fetched.Key); err != nil || !e.present(fetched.Key) {
		t.Fatalf("the fresh run's artifact: %v", err)
	}
	if again, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil || again != (store.GCResult{Done: true}) {
		t.Fatalf("a second collection: %+v %v", again, err)
	}
}

// TestCacheQuota: over its quota, a project's untrusted caches go first,
// then its least recently restored.
func TestCacheQuota(t *testing.T) {
	e := newGCEnv(t)
	for i := range 4 {
		e.job(fmt.Sprintf("j%d", i), nil, bytes.Repeat([]byte{byte('a' + i)}, 1000))
		e.exec(`UPDATE caches SET last_used_at = now() - make_interval(mins => $1) WHERE key = $2`, 4-i, fmt.Sprintf("j%d-cache", i))
	}
	e.exec(`UPDATE projects SET cache_quota_bytes = 2500`)
	res, err := e.s.CollectGarbage(context.Background(), store.GCOptions{})
	if err != nil || res.CachesOverQuota != 2 {
		t.Fatalf("collection: %+v %v", res, err)
	}
	if n := e.count(`SELECT count(*) FROM caches WHERE key IN ('j2-cache', 'j3-cache')`); n != 2 {
		t.Fatal("the most recently restored caches were not the ones kept")
	}
	// A fork's cache, however recently restored, does not push out the
	// trusted ones: it goes first.
	fork := store.BlobRef{ProjectID: e.project.ID, Digest: "sha256:0000000000000000000000000000000000000000000000000000000000000007"}
	e.exec(`INSERT INTO blobs (project_id, trusted, digest, size, s3_key) VALUES ($1, false, $2, 1000, $3)`, e.project.ID, fork.Digest, fork.Key())
	e.exec(`INSERT INTO caches (project_id, scope, trusted, key, digest, size, last_used_at)
	        VALUES ($1, 'refs/pull/1/merge', false, 'fork-cache', $2, 1000, now() + interval '1 minute')`, e.project.ID, fork.Digest)
	if res, err = e.s.CollectGarbage(context.Background(), store.GCOptions{}); err != nil || res.CachesOverQuota != 1 {
		t.Fatalf("collection with a fork's cache: %+v %v", res, err)
	}
	if n := e.count(`SELECT count(*) FROM caches WHERE key IN ('j2-cache', 'j3-cache')`); n != 2 {
		t.Fatal("a fork's cache pushed out a trusted one")
	}
}

// TestStorageQuota: a registration that would pass the project's storage
// quota is refused with 413 naming the quota, and so is an upload URL.
func TestStorageQuota(t *testing.T) {
	e := newGCEnv(t)
	e.exec(`UPDATE projects SET storage_quota_bytes = 100`)
	ref := e.put(bytes.Repeat([]byte("x"), 80))
	if err := e.s.RegisterBlob(context.Background(), ref, 80); err != nil {
		t.Fatal(err)
	}
	next := e.put(bytes.Repeat([]byte("y"), 30))
	for _, err := range []error{e.s.RegisterBlob(context.Background(), next, 30), prepareErr(e.s.PrepareBlobUpload(context.Background(), next, 30))} {
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != domain.ETooLarge || !bytes.Contains([]byte(de.Message), []byte("quota of 100 bytes")) {
			t.Fatalf("over the quota: %v", err)
		}
	}
}

// TestGCRacesCommits: the collector never deletes a blob a concurrent
// commit is registering. Round after round, a job commits as its artifact
// a blob the collector is about to collect (unreferenced and untouched for
// days, or an upload never committed for a day), at the same moment as a
// collection. Whoever wins, every artifact committed resolves to its bytes
// in S3; a commit that lost is refused with "upload again", never accepted
// with its bytes gone.
func TestGCRacesCommits(t *testing.T) {
	e := newGCEnv(t)
	ctx := context.Background()
	rounds := 120
	if testing.Short() {
		rounds = 20
	}
	var won, lost int
	for i := range rounds {
		data := []byte(fmt.Sprintf("round %d of the race", i))
		ref := e.put(data)
		n := int64(len(data))
		if i%2 == 0 { // a blob left over from runs past retention
			if err := e.s.RegisterBlob(ctx, ref, n); err != nil {
				t.Fatal(err)
			}
			e.exec(`UPDATE blobs SET touched_at = now() - interval '3 days' WHERE s3_key = $1`, ref.Key())
		} else { // an upload handed out a day ago, bytes there, not committed
			if _, err := e.s.PrepareBlobUpload(ctx, ref, n); err != nil {
				t.Fatal(err)
			}
			e.exec(`UPDATE uploads SET created_at = now() - interval '2 days' WHERE s3_key = $1`, ref.Key())
		}
		run, err := e.s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "j"}}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.s.Claim(ctx, e.runner, nil, 0)
		if err != nil || c == nil || c.Lease.RunID != run.ID {
			t.Fatalf("claim: %v", err)
		}
		start := make(chan struct{})
		commitErr, gcErr := make(chan error, 1), make(chan error, 1)
		go func() {
			<-start
			commitErr <- e.s.CommitArtifact(ctx, e.runner.ID, c.Lease.JobID, c.Lease, "dist", ref.Digest, n)
		}()
		go func() {
			<-start
			_, err := e.s.CollectGarbage(ctx, store.GCOptions{})
			gcErr <- err
		}()
		close(start)
		if err := <-gcErr; err != nil {
			t.Fatalf("round %d: collection: %v", i, err)
		}
		err = <-commitErr
		switch {
		case err == nil:
			won++
			if !e.present(ref.Key()) || e.count(`SELECT count(*) FROM blobs WHERE s3_key = $1`, ref.Key()) != 1 {
				t.Fatalf("round %d: a committed artifact's blob is gone (object %v)", i, e.present(ref.Key()))
			}
		case domain.ErrorCode(err) == domain.EInvalid:
			lost++
			if e.count(`SELECT count(*) FROM artifacts WHERE job_id = $1`, c.Lease.JobID) != 0 {
				t.Fatalf("round %d: a refused commit left an artifact", i)
			}
		default:
			t.Fatalf("round %d: commit: %v", i, err)
		}
		if _, err := e.s.Complete(ctx, e.runner.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds: the commit won %d, the collector %d", rounds, won, lost)
	// Every artifact committed in any round still resolves.
	rows, err := e.s.Pool().Query(ctx, `SELECT b.s3_key FROM artifacts a JOIN blobs b USING (project_id, trusted, digest)`)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := pgxCollectStrings(rows)
	if len(keys) != won {
		t.Fatalf("%d artifacts with blobs, %d commits won", len(keys), won)
	}
	for _, k := range keys {
		if !e.present(k) {
			t.Fatalf("artifact blob %s has no object", k)
		}
	}
}

func pgxCollectStrings(rows interface {
	Next() bool
	Scan(...any) error
	Close()
	Err() error
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// TestLogCompaction: an attempt that logged a byte at a time leaves a row
// per append while it runs; once it has ended, a collection merges them so
// rows grow with bytes, and every byte reads back the same, whatever range.
func TestLogCompaction(t *testing.T) {
	e := newGCEnv(t)
	ctx := context.Background()
	if _, err := e.s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "chatty"}}}); err != nil {
		t.Fatal(err)
	}
	c, err := e.s.Claim(ctx, e.runner, nil, 0)
	if err != nil || c == nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range 3000 {
		b := []byte{byte('a' + i%26)}
		if i%500 == 499 {
			b = bytes.Repeat([]byte("x"), 100<<10) // a few big appends among the small
		}
		if _, err := e.s.AppendLog(ctx, e.runner.ID, c.Lease.JobID, c.Lease, int64(len(want)), b); err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
	}
	if n := e.count(`SELECT count(*) FROM log_chunks`); n != 3000 {
		t.Fatalf("%d chunks while running", n)
	}
	if _, err := e.s.Complete(ctx, e.runner.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0); err != nil {
		t.Fatal(err)
	}
	res, err := e.s.CollectGarbage(ctx, store.GCOptions{})
	if err != nil || res.LogsCompacted != 1 {
		t.Fatalf("collection: %+v %v", res, err)
	}
	rows := e.count(`SELECT count(*) FROM log_chunks`)
	if limit := len(want)/(128<<10) + 2; rows > limit {
		t.Fatalf("%d chunks for %d bytes after compaction, want at most %d", rows, len(want), limit)
	}
	for _, r := range [][2]int64{{0, int64(len(want))}, {1, 7}, {250 << 10, 300 << 10}, {int64(len(want)) - 3, 10}} {
		got, _, err := e.s.ReadLog(ctx, c.Lease.RunID, c.Lease.JobID, 0, r[0], r[1])
		end := min(r[0]+r[1], int64(len(want)))
		if err != nil || !bytes.Equal(got, want[r[0]:end]) {
			t.Fatalf("read [%d, +%d): %d bytes, %v", r[0], r[1], len(got), err)
		}
	}
	if again, _ := e.s.CollectGarbage(ctx, store.GCOptions{}); again.LogsCompacted != 0 {
		t.Fatalf("compacted twice: %+v", again)
	}
}

// TestRunLimits: a run's jobs together may log at most the run's limit and
// commit at most its artifact limit; past either, 413 names the limit.
func TestRunLimits(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{MaxLogBytes: 1000, MaxRunLogBytes: 1500, MaxRunArtifactBytes: 100})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "a"}, {Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Claim(ctx, r, nil, 0)
	b, _ := s.Claim(ctx, r, nil, 0)
	log := func(c *store.Claim, total int) error {
		var err error
		for off := 0; off < total && err == nil; off += 100 {
			_, err = s.AppendLog(ctx, r.ID, c.Lease.JobID, c.Lease, int64(off), bytes.Repeat([]byte("x"), 100))
		}
		return err
	}
	if err := log(a, 900); err != nil {
		t.Fatal(err)
	}
	err := log(b, 900)
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.ETooLarge || !bytes.Contains([]byte(de.Message), []byte("run limit of 1500")) {
		t.Fatalf("past the run's log limit: %v", err)
	}
	var stored int
	_ = s.Pool().QueryRow(ctx, `SELECT sum(length(data)) FROM log_chunks`).Scan(&stored)
	if stored > 1500 {
		t.Fatalf("the run's jobs stored %d log bytes, over its limit of 1500", stored)
	}
	objects := castest.New(t)
	s.SetObjects(objects)
	for i, size := range []int{60, 60} {
		data := bytes.Repeat([]byte{byte('a' + i)}, size)
		sum := sha256.Sum256(data)
		ref := store.BlobRef{ProjectID: a.Lease.RunID, Trusted: true, Digest: "sha256:" + hex.EncodeToString(sum[:])}
		var pid string
		_ = s.Pool().QueryRow(ctx, `SELECT project_id FROM runs WHERE id = $1`, a.Lease.RunID).Scan(&pid)
		ref.ProjectID = pid
		if err := objects.Put(ctx, ref.Key(), ref.Digest, bytes.NewReader(data), int64(size)); err != nil {
			t.Fatal(err)
		}
		err := s.CommitArtifact(ctx, r.ID, a.Lease.JobID, a.Lease, fmt.Sprintf("art%d", i), ref.Digest, int64(size))
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 1 && (!errors.As(err, &de) || de.Code != domain.ETooLarge || !bytes.Contains([]byte(de.Message), []byte("run limit of 100"))) {
			t.Fatalf("past the run's artifact limit: %v", err)
		}
	}
}
