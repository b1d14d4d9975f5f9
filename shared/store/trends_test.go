package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestTrends: a job's history is its ended runs in its project, oldest
// first, with durations; each busy branch's outcomes come in order;
// neither is shown to someone who cannot read the project.
func TestTrends(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	r := newRunner(t, s)
	var last store.Run
	for i, outcome := range []domain.Outcome{domain.OutcomePassed, domain.OutcomeFailed, domain.OutcomePassed} {
		ref := "refs/heads/main"
		if i == 1 {
			ref = "refs/heads/dev"
		}
		run, err := s.CreateRun(ctx, store.NewRun{Project: "p", GitRef: ref, Jobs: []store.NewJob{{Name: "build"}}})
		if err != nil {
			t.Fatal(err)
		}
		complete(t, s, r, claimAll(t, s, r)["build"], outcome)
		last = run
	}
	h, err := s.JobHistory(ctx, root, last.ID, "build", 30)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintln(len(h), h[0].RunNumber, h[1].State, h[2].RunNumber); got != "3 1 FAILED 3\n" {
		t.Fatalf("history %v", got)
	}
	trends, err := s.BranchTrends(ctx, root, "p", 5, 50)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(trends); got != "[{main [true true]} {dev [false]}]" {
		t.Fatalf("trends %s", got)
	}
	stranger, _, err := s.CreateUser(ctx, "stranger", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := s.JobHistory(ctx, stranger, last.ID, "build", 30); err != nil || len(h) != 0 {
		t.Fatalf("a stranger's history: %v %v", h, err)
	}
	if _, err := s.BranchTrends(ctx, stranger, "p", 5, 50); domain.ErrorCode(err) != domain.ENotFound {
		t.Fatalf("a stranger's trends: %v", err)
	}
}
