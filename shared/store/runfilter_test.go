package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestListRunsFilters: runs are filtered by branch (a name or a full
// ref), state and trigger prefix, paged with the filter kept; a state
// that does not exist is refused rather than matching nothing.
func TestListRunsFilters(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	mk := func(ref, trigger string) store.Run {
		run, err := s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: ref, Trigger: trigger, Jobs: []store.NewJob{{Name: "a"}}})
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	push := mk("refs/heads/main", "github:push refs/heads/main")
	pr := mk("refs/pull/3/head", "github:pull_request #3 from alice")
	sched := mk("refs/heads/main", "schedule: 0 3 * * *")
	dev := mk("refs/heads/dev", "github:push refs/heads/dev")
	if _, _, err := s.Cancel(ctx, root, dev.ID, ""); err != nil {
		t.Fatal(err)
	}
	list := func(f store.RunFilter) []int64 {
		t.Helper()
		runs, _, err := s.ListRuns(ctx, root, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, r := range runs {
			out = append(out, r.Number)
		}
		return out
	}
	for name, tc := range map[string]struct {
		f    store.RunFilter
		want []int64
	}{
		"branch name":    {store.RunFilter{Branch: "main"}, []int64{sched.Number, push.Number}},
		"full ref":       {store.RunFilter{Branch: "refs/pull/3/head"}, []int64{pr.Number}},
		"state":          {store.RunFilter{State: domain.RunCanceled}, []int64{dev.Number}},
		"trigger prefix": {store.RunFilter{Trigger: "github:pull_request"}, []int64{pr.Number}},
		"all three":      {store.RunFilter{Branch: "main", State: domain.RunPending, Trigger: "github:push"}, []int64{push.Number}},
		"a project":      {store.RunFilter{Project: "p", Trigger: "schedule"}, []int64{sched.Number}},
	} {
		if got := list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: runs %v, want %v", name, got, tc.want)
		}
	}
	first, next, err := s.ListRuns(ctx, root, store.RunFilter{Branch: "main", Page: store.Page{Limit: 1}})
	if err != nil || len(first) != 1 || first[0].Number != sched.Number || next == "" {
		t.Fatalf("first page: %v %q %v", first, next, err)
	}
	if got := list(store.RunFilter{Branch: "main", Page: store.Page{Limit: 1, Cursor: next}}); !slices.Equal(got, []int64{push.Number}) {
		t.Fatalf("second page: %v", got)
	}
	if _, _, err := s.ListRuns(ctx, root, store.RunFilter{State: "DONE"}); domain.ErrorCode(err) != domain.EInvalid {
		t.Fatalf("an unknown state: %v", err)
	}
}
