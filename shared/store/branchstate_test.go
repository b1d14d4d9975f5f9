package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestUntrustedRunsSayNothingOfTheBranch: a branch's state is that of its
// trusted runs. An untrusted run of main (no secrets, code main may not
// hold) that fails neither says branch_failed nor turns the badge red, and
// one that passes neither says branch_recovered nor hides the failure;
// the pass-rate chart leaves both out. Every run still says run_ended.
func TestUntrustedRunsSayNothingOfTheBranch(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	if _, _, err := s.AddHook(ctx, root, p.ID, "https://hooks.example.com/x", "json",
		[]string{"run_ended", "branch_failed", "branch_recovered"}); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		untrusted bool
		state     string
		events    string // this run's notifications
		badge     string // main's badge after it
	}{
		{false, "PASSED", "run_ended", "PASSED"},
		{true, "FAILED", "run_ended", "PASSED"},
		{false, "FAILED", "branch_failed,run_ended", "FAILED"},
		{true, "PASSED", "run_ended", "FAILED"},
		{false, "PASSED", "branch_recovered,run_ended", "PASSED"},
	} {
		run, err := s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: "refs/heads/main", Untrusted: step.untrusted,
			Jobs: []store.NewJob{{Name: "a"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `UPDATE runs SET state = $2, finished_at = clock_timestamp() WHERE id = $1`, run.ID, step.state); err != nil {
			t.Fatal(err)
		}
		var events []string
		rows, _ := s.Pool().Query(ctx, `SELECT event FROM notifications WHERE run_id = $1 ORDER BY event`, run.ID)
		for rows.Next() {
			var e string
			_ = rows.Scan(&e)
			events = append(events, e)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(events, ","); got != step.events {
			t.Errorf("run %d (untrusted %v, %s): notifications %s, want %s", i+1, step.untrusted, step.state, got, step.events)
		}
		if badge, err := s.Badge(ctx, &root, "p", "main"); err != nil || badge != step.badge {
			t.Errorf("run %d (untrusted %v, %s): badge %q %v, want %s", i+1, step.untrusted, step.state, badge, err, step.badge)
		}
	}
	trends, err := s.BranchTrends(ctx, root, p.ID, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(trends) != 1 || !slices.Equal(trends[0].Passed, []bool{true, false, true}) {
		t.Errorf("main's chart: %s, want the three trusted runs [true false true]", fmt.Sprint(trends))
	}
}
