package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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
