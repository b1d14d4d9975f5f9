package store_test

import (
	"context"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
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
