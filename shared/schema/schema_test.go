package schema_test

import (
	"context"
	"io/fs"
	"sync"
	"testing"

	"github.com/forgeci/forgeci/migrations"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/schema"
)

// TestMigrateConcurrentAndIdempotent: four processes migrating an empty
// database at once apply each migration exactly once (the advisory lock),
// and migrating again applies nothing.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyDatabase(t, "migrate_test")

	files, _ := fs.Glob(migrations.FS, "*.sql")
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := schema.Migrate(ctx, url, nil)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != len(files) {
		t.Fatalf("concurrent migrations applied %d in all, want %d", total, len(files))
	}
	if n, err := schema.Migrate(ctx, url, nil); err != nil || n != 0 {
		t.Fatalf("second migrate applied %d (%v), want 0", n, err)
	}
}

// TestMigrateAndSealSkipsOnlyWhenCurrent: the deploy-time migration asks
// whether every migration is applied and runs goose only if not: an empty
// database gets them all, one a migration behind gets that one, and a
// current one gets none.
func TestMigrateAndSealSkipsOnlyWhenCurrent(t *testing.T) {
	ctx := context.Background()
	files, _ := fs.Glob(migrations.FS, "*.sql")
	empty := pgtest.EmptyDatabase(t, "migrate_seal_empty")
	if n, _, err := schema.MigrateAndSeal(ctx, empty, nil, nil); err != nil || n != len(files) {
		t.Fatalf("empty database: applied %d (%v), want %d", n, err, len(files))
	}
	if n, _, err := schema.MigrateAndSeal(ctx, empty, nil, nil); err != nil || n != 0 {
		t.Fatalf("current database: applied %d (%v), want 0", n, err)
	}
	behind := pgtest.EmptyDatabase(t, "migrate_seal_behind")
	if err := schema.MigrateTo(ctx, behind, int64(len(files)-1)); err != nil {
		t.Fatal(err)
	}
	if n, _, err := schema.MigrateAndSeal(ctx, behind, nil, nil); err != nil || n != 1 {
		t.Fatalf("a database one behind: applied %d (%v), want 1", n, err)
	}
}
