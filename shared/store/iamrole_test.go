package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// The IAM user gets the migrating user's privileges, and making it again
// changes nothing.
func TestEnsureIAMUser(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	user := "forgeci_app_test"
	for range 2 {
		if err := store.EnsureIAMUser(ctx, url, user); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if _, err := conn.Exec(ctx, "SET ROLE forgeci_app_test"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM jobs").Scan(&n); err != nil {
		t.Fatalf("the IAM user cannot read jobs: %v", err)
	}
	if err := store.EnsureIAMUser(ctx, url, `x"; DROP TABLE jobs; --`); err == nil {
		t.Fatal("a role name with quotes was taken")
	}
}
