package schema_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/schema"
)

// TestNoRedundantIndexes: no plain index (not unique, not partial, no
// expressions) has columns that lead another index of the same table
// that covers every row: the longer one serves the same lookups, and each
// index costs every write and each new connection's first query.
func TestNoRedundantIndexes(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyDatabase(t, "indexes_test")
	if _, err := schema.Migrate(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	type index struct {
		table, name     string
		cols            []int16 // key columns; 0 for an expression
		unique, partial bool
		desc            []int16 // indoption per key column
	}
	rows, err := conn.Query(ctx, `
SELECT c.relname, i.relname, x.indkey::int2[], x.indisunique, x.indpred IS NOT NULL,
       x.indoption::int2[]
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND i.relam = (SELECT oid FROM pg_am WHERE amname = 'btree')`)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var ix index
		err := r.Scan(&ix.table, &ix.name, &ix.cols, &ix.unique, &ix.partial, &ix.desc)
		return ix, err
	})
	if err != nil || len(all) < 10 {
		t.Fatalf("%d indexes: %v", len(all), err)
	}
	for _, a := range all {
		if a.unique || a.partial || slices.Contains(a.cols, 0) {
			continue
		}
		for _, b := range all {
			if b.table != a.table || b.name == a.name || b.partial || len(b.cols) < len(a.cols) {
				continue
			}
			n := len(a.cols)
			if slices.Equal(b.cols[:n], a.cols) && slices.Equal(b.desc[:n], a.desc) {
				t.Errorf("index %s on %s is a prefix of %s", a.name, a.table, b.name)
			}
		}
	}
}
