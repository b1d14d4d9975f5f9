package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestQueueAndRunners: the queue lists what waits with the runners that
// could take each job (labels, scope, trust, declared features; revoked
// ones not), names for admins only; the runners page shows what each
// runner said of itself, what it runs now and its recent failures.
func TestQueueAndRunners(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	qp := pgtest.Project(t, s, "q")
	root := pgtest.Admin(t, s, "root")
	linux := scopedRunner(t, s, store.Scope{Untrusted: true}, "linux")
	mac := scopedRunner(t, s, store.Scope{Untrusted: true}, "mac")
	other := scopedRunner(t, s, store.Scope{Projects: []string{qp.ID}}, "linux")
	gone := scopedRunner(t, s, store.Scope{Untrusted: true}, "linux")
	if err := s.RevokeRunner(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	// linux polls once, idle, saying what it is.
	linux.Version, linux.Slots, linux.Features = "v1.2.3", 2, []string{domain.FeatureReports}
	if c, err := s.Claim(ctx, linux, nil, 0); err != nil || c != nil {
		t.Fatalf("idle poll: %v %v", c, err)
	}
	run, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{
		{Name: "build", Labels: []string{"linux"}},
		{Name: "test", Labels: []string{"linux"}, Spec: domain.JobSpec{Reports: &domain.ReportsSpec{JUnit: []string{"x.xml"}}}},
		{Name: "ios", Labels: []string{"mac", "xcode"}}}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, j := range q {
		got[j.Name] = fmt.Sprintf("%v %d/%d", j.Runners, j.Alive, j.Eligible)
		if j.RunID != run.ID || j.Waiting < 0 {
			t.Fatalf("queued job %+v", j)
		}
	}
	// "r" is each runner's name here; the mac runner lacks xcode, the
	// scoped one serves another project, the revoked one nothing.
	want := map[string]string{"build": "[r] 1/1", "test": "[r] 1/1", "ios": "[] 0/0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queue %v, want %v (mac %s, other %s)", got, want, mac.ID, other.ID)
	}
	reader, _, err := s.CreateUser(ctx, "rita", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMember(ctx, root, p.ID, "rita", store.RoleRead, false); err != nil {
		t.Fatal(err)
	}
	if q, err := s.Queue(ctx, reader); err != nil || len(q) != 3 || q[0].Runners != nil || q[0].Eligible != 1 {
		t.Fatalf("a reader's queue: %+v %v", q, err)
	}

	// linux takes build and fails it, then takes test.
	c, err := s.Claim(ctx, linux, nil, 0)
	if err != nil || c == nil {
		t.Fatal(err)
	}
	complete(t, s, linux, c, domain.OutcomeFailed)
	if c, err = s.Claim(ctx, linux, nil, 0); err != nil || c == nil {
		t.Fatal(err)
	}
	runners, _, err := s.ListRunners(ctx, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(runners, func(r store.RunnerInfo) bool { return r.ID == linux.ID })
	r := runners[i]
	if r.Version != "v1.2.3" || r.Slots != 2 || len(r.Jobs) != 1 || r.Jobs[0].Name != "test" || r.Jobs[0].Project != "p" ||
		r.Failures != 1 || r.Attempts != 1 {
		t.Fatalf("the linux runner: %+v", r)
	}
	// A passed attempt counts among its attempts, not its failures.
	complete(t, s, linux, c, domain.OutcomePassed)
	if runners, _, err = s.ListRunners(ctx, store.Page{}); err != nil {
		t.Fatal(err)
	}
	if r = runners[i]; r.ID != linux.ID || len(r.Jobs) != 0 || r.Failures != 1 || r.Attempts != 2 {
		t.Fatalf("the linux runner after a pass: %+v", r)
	}
}
