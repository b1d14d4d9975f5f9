package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// TestProjectVariables: admins set and delete a project's variables,
// members read them (values included, they are not secret), others
// nothing; names, values and their count are bounded; a run keeps the
// values it was made with (its retry too), once, not in each job; its
// control-plane expressions (run-name, a job's if:) and its claims read
// them; an untrusted run gets none.
func TestProjectVariables(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	member := func(name, role string) store.User {
		u, _, err := s.CreateUser(ctx, name, "user")
		if err != nil {
			t.Fatal(err)
		}
		if role != "" {
			if _, err := s.SetMember(ctx, root, p.ID, u.ID, role, false); err != nil {
				t.Fatal(err)
			}
		}
		return u
	}
	reader, writer, stranger := member("rita", store.RoleRead), member("will", store.RoleWrite), member("sam", "")
	if err := s.SetVariable(ctx, root, p.ID, "REGION", "eu-west-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVariable(ctx, writer, p.ID, "REGION", "us-east-1"); !domain.Is(err, domain.EForbidden, domain.ENotFound) {
		t.Fatalf("a writer set a variable: %v", err)
	}
	if vars, _, err := s.ListVariables(ctx, reader, p.ID, store.Page{}); err != nil || len(vars) != 1 || vars[0].Value != "eu-west-1" {
		t.Fatalf("a reader lists %+v: %v", vars, err)
	}
	if _, _, err := s.ListVariables(ctx, stranger, p.ID, store.Page{}); err == nil {
		t.Fatal("a stranger listed the project's variables")
	}
	for name, value := range map[string]string{"region": "x", "GITHUB_X": "x", "FORGECI_X": "x", "9X": "x",
		"BIG": strings.Repeat("v", store.MaxVariableBytes+1), "NUL": "a\x00b"} {
		if err := s.SetVariable(ctx, root, p.ID, name, value); !domain.Is(err, domain.EInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for i := 1; i < store.MaxVariables; i++ {
		if err := s.SetVariable(ctx, root, p.ID, fmt.Sprintf("V%03d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetVariable(ctx, root, p.ID, "ONE_TOO_MANY", "x"); err == nil || !strings.Contains(err.Error(), "at most 100 variables") {
		t.Fatalf("the 101st variable: %v", err)
	}
	if err := s.SetVariable(ctx, root, p.ID, "REGION", "eu-central-1"); err != nil {
		t.Fatalf("changing one of 100: %v", err)
	}

	r := newRunner(t, s)
	r.Features = []string{domain.FeatureExpressions, domain.FeatureVars}
	file := "run-name: 'to ${{ vars.REGION }}'\njobs:\n  a: {if: \"vars.REGION == 'eu-central-1'\", steps: [{run: 'echo ${{ vars.REGION }}'}]}\n  b: {if: \"vars.REGION == 'elsewhere'\", steps: [{run: x}]}\n"
	run := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/heads/main"}, file)
	if got := runState(t, s, run.ID); got.Vars["REGION"] != "eu-central-1" || got.RunName != "to eu-central-1" {
		t.Fatalf("the run's vars %v, name %q", got.Vars, got.RunName)
	}
	claims := claimAll(t, s, r)
	var job domain.ClaimedJob
	if claims["a"] == nil || claims["b"] != nil || json.Unmarshal(claims["a"].Job, &job) != nil ||
		job.Run == nil || job.Run.Vars["REGION"] != "eu-central-1" {
		t.Fatalf("claims %v, job a's facts %+v", claims, job.Run)
	}
	complete(t, s, r, claims["a"], domain.OutcomePassed)
	if err := s.DeleteVariable(ctx, root, p.ID, "REGION"); err != nil {
		t.Fatal(err)
	}
	again, err := s.Retry(ctx, root, run.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := runState(t, s, again.ID); got.Vars["REGION"] != "eu-central-1" {
		t.Fatalf("the retry read %v, not its run's", got.Vars)
	}
	// The variables are the run's, not copied into each job's spec, nor
	// into a page of runs.
	var inSpecs int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs WHERE run_id = $1 AND spec->'run' ? 'vars'`, run.ID).Scan(&inSpecs); err != nil || inSpecs != 0 {
		t.Fatalf("%d job specs hold the variables (%v)", inSpecs, err)
	}
	if runs, _, err := s.ListRuns(ctx, root, store.RunFilter{Project: "p"}); err != nil || len(runs) == 0 || runs[0].Vars != nil {
		t.Fatalf("a page of runs: %v", err)
	}
	// As GitHub's, an untrusted run (a fork's pull request) gets none.
	fork := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/pull/1/head", Untrusted: true}, file)
	if got := runState(t, s, fork.ID); len(got.Vars) != 0 || got.RunName != "to" {
		t.Fatalf("an untrusted run's vars %v, name %q", got.Vars, got.RunName)
	}
	fresh := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/heads/main"}, "run-name: 'to ${{ vars.REGION }}'\njobs:\n  a: {steps: [{run: x}]}\n")
	if got := runState(t, s, fresh.ID); got.RunName != "to" || got.Vars["REGION"] != "" {
		t.Fatalf("a run after the delete: region %q, name %q", got.Vars["REGION"], got.RunName)
	}
}

// TestRunsOnReadsVars: runs-on may name the project's variables and the
// run's facts, evaluated when the run is made (a job then waits for a
// runner of that label); an empty label is dropped; a label made invalid,
// or none at all, refuses the run.
func TestRunsOnReadsVars(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	root := pgtest.Admin(t, s, "root")
	if err := s.SetVariable(ctx, root, p.ID, "RUNNER", "gpu"); err != nil {
		t.Fatal(err)
	}
	run := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/heads/main"},
		"jobs:\n  a: {runs-on: ['${{ vars.RUNNER }}', '${{ vars.NONE }}', 'linux'], steps: [{run: x}]}\n")
	var labels []string
	if err := s.Pool().QueryRow(ctx, `SELECT labels FROM jobs WHERE run_id = $1`, run.ID).Scan(&labels); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(labels) != "[gpu linux]" {
		t.Fatalf("labels %v", labels)
	}
	if c := claimAll(t, s, newRunner(t, s, "linux")); len(c) != 0 {
		t.Fatalf("a runner without the label took %v", c)
	}
	if c := claimAll(t, s, newRunner(t, s, "linux", "gpu")); c["a"] == nil {
		t.Fatal("the runner of both labels took nothing")
	}
	for file, want := range map[string]string{
		"jobs:\n  a: {runs-on: '${{ vars.NONE }}', steps: [{run: x}]}\n":         "runs-on made no label",
		"jobs:\n  a: {runs-on: '${{ github.workflow }} x', steps: [{run: x}]}\n": "is not valid",
	} {
		pl, err := pipeline.Parse("f.yml", []byte(file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Workflow: pl.WorkflowName(), Jobs: pl.Jobs}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", file, err, want)
		}
	}
}
