package store_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestClaimNeedsFeatures: a job whose steps need the steps feature goes
// only to a claim that declares it; a job that needs none goes to any.
func TestClaimNeedsFeatures(t *testing.T) {
	ctx := context.Background()
	needs := domain.JobSpec{Steps: []domain.Step{{Run: "true", If: "always()"}}}
	plain := domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}
	s, r, _ := newRun(t, []store.NewJob{{Name: "needs-steps", Spec: needs}})
	if c, err := s.Claim(ctx, r, nil, 0); err != nil || c != nil {
		t.Fatalf("a runner declaring no features claimed a job that needs steps: %v, %v", c, err)
	}
	r.Features = []string{"other"}
	if c, err := s.Claim(ctx, r, nil, 0); err != nil || c != nil {
		t.Fatalf("a runner declaring other features claimed it: %v, %v", c, err)
	}
	r.Features = []string{"other", domain.FeatureSteps}
	c, err := s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("a runner declaring steps did not get the job: %v", err)
	}
	if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "plain", Spec: plain}}}); err != nil {
		t.Fatal(err)
	}
	r.Features = nil
	if c, err := s.Claim(ctx, r, nil, 0); err != nil || c == nil {
		t.Fatalf("a job that needs no feature was not claimed by a runner declaring none: %v", err)
	}
}

// TestRunFactsInSpec: a job's spec carries its run's facts for the
// runner's expressions: GitHub's event name and ref, the run's number.
func TestRunFactsInSpec(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	sha := strings.Repeat("a", 40)
	run, err := s.CreateRun(ctx, store.NewRun{Project: "p", Trigger: "github:push refs/heads/main", GitRef: "refs/heads/main",
		GitSHA: sha, Actor: "github:42", Jobs: []store.NewJob{{Name: "j", Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v", err)
	}
	var job domain.ClaimedJob
	if err := json.Unmarshal(c.Job, &job); err != nil {
		t.Fatal(err)
	}
	want := domain.RunFacts{Ref: "refs/heads/main", RefName: "main", SHA: sha, EventName: "push", Actor: "github:42",
		Repository: "p", RunID: run.ID, RunNumber: run.Number}
	if job.Run == nil || !reflect.DeepEqual(*job.Run, want) {
		t.Fatalf("run facts %+v, want %+v", job.Run, want)
	}
}
