package store_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/migrations"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestMigrateConcurrentAndIdempotent: four processes migrating an empty
// database at once apply each migration exactly once (the advisory lock),
// and migrating again applies nothing.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS migrate_test WITH (FORCE)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE migrate_test`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS migrate_test WITH (FORCE)`) })
	url := strings.Replace(admin, "/postgres?", "/migrate_test?", 1)

	files, _ := fs.Glob(migrations.FS, "*.sql")
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := store.Migrate(ctx, url, nil)
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
	if n, err := store.Migrate(ctx, url, nil); err != nil || n != 0 {
		t.Fatalf("second migrate applied %d (%v), want 0", n, err)
	}
}
