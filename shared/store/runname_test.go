package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// TestRunName: a pipeline's run-name is evaluated when the run is made,
// with its facts (its number among them) and inputs, as one line of text;
// a retry is named as its run was; a run-name that cannot be evaluated
// is the run's error, and nothing is made.
func TestRunName(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	r := newRunner(t, s)
	file := "run-name: \"Deploy #${{ github.run_number }} of ${{ github.ref_name }} by ${{ github.actor }}: ${{ inputs.why }}\\a\u202e\"\njobs:\n  a: {steps: [{run: x}]}\n"
	run := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/heads/main", Actor: "ann",
		Inputs: map[string]any{"why": "hotfix\nline two"}}, file)
	want := "Deploy #1 of main by ann: hotfix\uFFFDline two\uFFFD\uFFFD"
	if got := runState(t, s, run.ID); got.RunName != want || run.RunName != want {
		t.Fatalf("run name %q (as made %q), want %q", got.RunName, run.RunName, want)
	}
	complete(t, s, r, claimAll(t, s, r)["a"], domain.OutcomePassed)
	again, err := s.Retry(ctx, pgtest.Admin(t, s, "root"), run.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, again.ID); got.RunName != want || got.Number != 2 {
		t.Fatalf("the retry #%d is named %q, want %q", got.Number, got.RunName, want)
	}
	plain := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/heads/main"}, "jobs:\n  a: {steps: [{run: x}]}\n")
	if got := runState(t, s, plain.ID); got.RunName != "" {
		t.Fatalf("a run without run-name is named %q", got.RunName)
	}
	pl, err := pipeline.Parse("f.yml", []byte("jobs:\n  a: {steps: [{run: x}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateRun(ctx, store.NewRun{Project: "p", RunName: "${{ fromJSON('{') }}", Jobs: pl.Jobs})
	if err == nil || !strings.Contains(err.Error(), "run-name:") {
		t.Fatalf("a run-name that fails: %v", err)
	}
}
