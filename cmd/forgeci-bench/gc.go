package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/store"
)

// The collector's throughput. In the database: 1,000,000 registered blobs
// of which 1% are live (a run's source), swept by store.CollectGarbage
// (batches that lock each key and row and re-check each blob) beside the
// bare bulk DELETE of everything unreferenced, on an identical copy. In
// S3: 10,000 unreferenced blobs swept with their objects beside a bare
// DeleteObjects of the same keys (one local directory of a million files
// would measure the disk, not the collector).
const (
	gcBlobs       = 1_000_000
	gcLivePercent = 1
	gcObjects     = 10_000
)

func benchGC(ctx context.Context, admin string, _ int) ([]row, error) {
	ours, err := gcDatabase(ctx, admin, "bench_gc_ours", func(st *store.Store, _ *pgxpool.Pool) error {
		res, err := st.CollectGarbage(ctx, store.GCOptions{Batch: 2000, Budget: time.Hour})
		if err == nil && (res.Blobs != gcBlobs*(100-gcLivePercent)/100 || !res.Done) {
			err = fmt.Errorf("swept %+v", res)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	raw, err := gcDatabase(ctx, admin, "bench_gc_raw", func(_ *store.Store, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, `DELETE FROM blobs b WHERE NOT EXISTS (SELECT 1 FROM runs r
			WHERE (r.project_id, r.trusted, r.source_digest) = (b.project_id, b.trusted, b.digest))`)
		return err
	})
	if err != nil {
		return nil, err
	}
	objOurs, objRaw, err := gcObjectsRate(ctx, admin)
	if err != nil {
		return nil, err
	}
	swept := float64(gcBlobs * (100 - gcLivePercent) / 100)
	return []row{
		{name: "gc, 1M blobs, 1% live (database)", figure: swept / ours.Seconds(), baseline: swept / raw.Seconds(),
			unit: "blobs/s", higherIsBetter: true, goal: 0.25, baselineName: "one bulk DELETE"},
		{name: "gc, 10k blobs with S3 objects", figure: objOurs, baseline: objRaw, unit: "blobs/s",
			higherIsBetter: true, goal: 0.4, baselineName: "bare DeleteObjects"},
	}, nil
}

// gcDatabase seeds a fresh database with gcBlobs old blobs, gcLivePercent
// of them a run's source, and times sweep on it.
func gcDatabase(ctx context.Context, admin, name string, sweep func(*store.Store, *pgxpool.Pool) error) (time.Duration, error) {
	db, err := openDB(ctx, admin, name, 4)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	pool := db.Pool
	live := gcBlobs * gcLivePercent / 100
	for _, q := range []string{
		`INSERT INTO projects (id, name) VALUES ('p', 'bench')`,
		`INSERT INTO blobs (project_id, trusted, digest, size, s3_key, touched_at)
		 SELECT 'p', true, 'sha256:' || encode(sha256(i::text::bytea), 'hex'), 1000,
		        'p/p/trusted/sha256/' || encode(sha256(i::text::bytea), 'hex'), now() - interval '3 days'
		 FROM generate_series(1, ` + strconv.Itoa(gcBlobs) + `) i`,
		`INSERT INTO runs (id, project_id, number, trusted, source_digest, manifest_digest, source_size)
		 SELECT 'run-' || i, 'p', i, true, 'sha256:' || encode(sha256((i * 100)::text::bytea), 'hex'),
		        'sha256:' || encode(sha256((i * 100)::text::bytea), 'hex'), 1000
		 FROM generate_series(1, ` + strconv.Itoa(live) + `) i`,
		`VACUUM ANALYZE`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("seed: %w", err)
		}
	}
	start := time.Now()
	if err := sweep(store.New(pool, store.Limits{}), pool); err != nil {
		return 0, err
	}
	took := time.Since(start)
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM blobs`).Scan(&left); err != nil || left != live {
		return 0, fmt.Errorf("%d blobs left, want the %d live ones (%v)", left, live, err)
	}
	return took, nil
}

// gcObjectsRate: blobs per second swept with their objects by the
// collector, and objects per second deleted by bare DeleteObjects.
func gcObjectsRate(ctx context.Context, admin string) (float64, float64, error) {
	blobs, err := cas.New(ctx, cas.Config{Bucket: "bench-gc", Endpoint: os.Getenv("FORGECI_TEST_S3_ENDPOINT"),
		AccessKey: os.Getenv("FORGECI_TEST_S3_ACCESS_KEY"), SecretKey: os.Getenv("FORGECI_TEST_S3_SECRET_KEY"),
		Region: os.Getenv("FORGECI_TEST_S3_REGION")})
	if err != nil {
		return 0, 0, err
	}
	if err := blobs.EnsureBucket(ctx); err != nil {
		return 0, 0, err
	}
	put := func(prefix string) ([]string, error) {
		var keys []string
		for i := range gcObjects {
			data := []byte(prefix + strconv.Itoa(i))
			d := digestHex(data)
			key := "p/p/trusted/sha256/" + strings.TrimPrefix(d, "sha256:")
			if err := blobs.Put(ctx, key, d, strings.NewReader(string(data)), int64(len(data))); err != nil {
				return nil, err
			}
			keys = append(keys, key)
		}
		return keys, nil
	}
	rawKeys, err := put("raw ")
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := blobs.Delete(ctx, rawKeys); err != nil {
		return 0, 0, err
	}
	raw := float64(gcObjects) / time.Since(start).Seconds()

	db, err := openDB(ctx, admin, "bench_gc_s3", 4)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	pool := db.Pool
	keys, err := put("ours ")
	if err != nil {
		return 0, 0, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO projects (id, name) VALUES ('p', 'bench')`); err != nil {
		return 0, 0, err
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO blobs (project_id, trusted, digest, size, s3_key, touched_at)
		SELECT 'p', true, 'sha256:' || substr(k, 20), 10, k, now() - interval '3 days' FROM unnest($1::text[]) k`, keys); err != nil {
		return 0, 0, err
	}
	st := store.New(pool, store.Limits{})
	st.SetObjects(blobs)
	start = time.Now()
	res, err := st.CollectGarbage(ctx, store.GCOptions{Batch: 1000, Budget: time.Hour})
	if err != nil || res.Blobs != gcObjects {
		return 0, 0, fmt.Errorf("swept %+v: %v", res, err)
	}
	return float64(gcObjects) / time.Since(start).Seconds(), raw, nil
}

func digestHex(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
