package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestListRunnersJobs: each runner of a page shows the jobs it runs now,
// oldest first, with their project and run number, and a runner that
// runs none an empty list; a runner on the next page that runs a job is
// shown there, with its job, and not on the first.
func TestListRunnersJobs(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	pgtest.Project(t, s, "q")
	// Oldest first: a (on page two) runs q's job, b runs none, c runs two.
	a := scopedRunner(t, s, store.Scope{Untrusted: true}, "a")
	b := scopedRunner(t, s, store.Scope{Untrusted: true}, "b")
	c := scopedRunner(t, s, store.Scope{Untrusted: true}, "c")
	newRun := func(project string, labels ...string) store.Run {
		t.Helper()
		run, err := s.CreateRun(ctx, store.NewRun{Project: project, Jobs: []store.NewJob{{Name: "job-" + strings.Join(labels, "-"), Labels: labels}}})
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	claim := func(r store.Runner) {
		t.Helper()
		if got, err := s.Claim(ctx, r, nil, 0); err != nil || got == nil {
			t.Fatalf("claim by %s: %v %v", r.Name, got, err)
		}
	}
	newRun("p", "nobody") // p#1, never claimed: no runner has its label
	first := newRun("p", "c")
	claim(c)
	second := newRun("q", "c")
	claim(c)
	third := newRun("q", "a")
	claim(a)

	rs, next, err := s.ListRunners(ctx, store.Page{Limit: 2})
	if err != nil || len(rs) != 2 || next == "" {
		t.Fatalf("page one: %+v %q %v", rs, next, err)
	}
	got := func(r store.RunnerInfo) string {
		var js []string
		for _, j := range r.Jobs {
			js = append(js, fmt.Sprintf("%s/%s#%d:%s", j.RunID, j.Project, j.RunNumber, j.Name))
		}
		return r.ID + " " + strings.Join(js, ",")
	}
	want := fmt.Sprintf("%s %s/p#%d:job-c,%s/q#%d:job-c", c.ID, first.ID, first.Number, second.ID, second.Number)
	if got(rs[0]) != want || got(rs[1]) != b.ID+" " {
		t.Fatalf("page one:\n%s\n%s\nwant\n%s\n%s", got(rs[0]), got(rs[1]), want, b.ID)
	}
	if j, _ := json.Marshal(rs[1]); !strings.Contains(string(j), `"jobs":[]`) {
		t.Errorf("a runner running nothing is shown as %s, want an empty jobs list", j)
	}
	rs, next, err = s.ListRunners(ctx, store.Page{Limit: 2, Cursor: next})
	if err != nil || len(rs) != 1 || next != "" {
		t.Fatalf("page two: %+v %q %v", rs, next, err)
	}
	if want := fmt.Sprintf("%s %s/q#%d:job-a", a.ID, third.ID, third.Number); got(rs[0]) != want {
		t.Fatalf("page two: %s, want %s", got(rs[0]), want)
	}
}

// TestListRunnersInAnotherDateStyle: the runner list, whose statements
// read their times as text (exec mode), is read in ISO whatever DateStyle
// the database is given: the pool sends ISO at connection (template.yaml
// pins it for RDS Proxy, where no startup setting may be sent).
func TestListRunnersInAnotherDateStyle(t *testing.T) {
	ctx := context.Background()
	url := databaseWith(t, "DateStyle = 'SQL, DMY'")
	pool, err := store.OpenPool(ctx, url, store.PoolOptions{MaxConns: 2, NoStatementCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := store.New(pool, store.Limits{})
	r := scopedRunner(t, s, store.Scope{Untrusted: true}, "x")
	rs, _, err := s.ListRunners(ctx, store.Page{})
	if err != nil || len(rs) != 1 || rs[0].ID != r.ID || time.Since(rs[0].CreatedAt).Abs() > time.Hour {
		t.Fatalf("runners %+v, %v", rs, err)
	}
}

// TestListRunnersActivity: each runner shows the projects it may serve,
// by name and sorted (none: every project, shown as []), and its
// attempts of the last week, failed or aborted and all, its own and no
// other's; an empty fleet is an empty list.
func TestListRunnersActivity(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	if rs, next, err := s.ListRunners(ctx, store.Page{}); err != nil || len(rs) != 0 || next != "" {
		t.Fatalf("an empty fleet: %+v %q %v", rs, next, err)
	}
	pgtest.Project(t, s, "zeta")
	pgtest.Project(t, s, "alpha")
	pgtest.Project(t, s, "mid")
	scoped := scopedRunner(t, s, store.Scope{Projects: []string{"zeta", "alpha"}, Untrusted: true}, "s")
	every := scopedRunner(t, s, store.Scope{Untrusted: true}, "e")
	one := scopedRunner(t, s, store.Scope{Projects: []string{"mid"}, Untrusted: true}, "o")
	finish := func(r store.Runner, project, label string, outcome domain.Outcome) {
		t.Helper()
		if _, err := s.CreateRun(ctx, store.NewRun{Project: project, Jobs: []store.NewJob{{Name: "j", Labels: []string{label}}}}); err != nil {
			t.Fatal(err)
		}
		c, err := s.Claim(ctx, r, nil, 0)
		if err != nil || c == nil {
			t.Fatalf("claim by %s: %v %v", r.Name, c, err)
		}
		if _, err := s.Complete(ctx, r.ID, c.Lease.JobID, c.Lease, outcome, 1); err != nil {
			t.Fatal(err)
		}
	}
	finish(every, "mid", "e", domain.OutcomePassed)
	finish(every, "mid", "e", domain.OutcomeFailed)
	finish(every, "alpha", "e", domain.OutcomeFailed)
	finish(scoped, "zeta", "s", domain.OutcomePassed)
	rs, _, err := s.ListRunners(ctx, store.Page{})
	if err != nil || len(rs) != 3 {
		t.Fatalf("runners %+v, %v", rs, err)
	}
	got := map[string]string{}
	for _, r := range rs {
		got[r.ID] = fmt.Sprintf("%v %d/%d", r.ProjectNames, r.Failures, r.Attempts)
	}
	want := map[string]string{scoped.ID: "[alpha zeta] 0/1", every.ID: "[] 2/3", one.ID: "[mid] 0/0"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("runner %s: %s, want %s", id, got[id], w)
		}
	}
	for _, r := range rs {
		if j, _ := json.Marshal(r); r.ID == every.ID && !strings.Contains(string(j), `"project_names":[]`) {
			t.Errorf("a runner of every project is shown as %s", j)
		}
	}
}
