package scm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/store"
)

const dispatchYAML = `on:
  push: {branches: [main]}
  workflow_dispatch:
    inputs:
      target: {type: choice, options: [staging, production], required: true}
jobs:
  deploy:
    runs-on: [linux]
    steps: [{run: "echo ${{ inputs.target }}"}]
`

// TestGitHubDispatch: a manual run of a GitHub project's ref is resolved
// through GitHub as the App when the worker takes it: the ref's commit,
// its pipeline's inputs checked, the run made as the user who asked (in
// their tier), and mirrored to a check run. A ref GitHub does not know, or
// bad inputs, fail the delivery saying why, and make nothing.
func TestGitHubDispatch(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	dir, sha := gitRepo(t, dispatchYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.gh.AddRef(repoName, "refs/heads/main", sha)
	_, token, err := e.store.CreateUser(ctx, "dora", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	dora, err := e.store.AuthenticateUser(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetMember(ctx, e.admin, e.project.ID, "dora", store.RoleWrite, true); err != nil {
		t.Fatal(err)
	}
	ask := func(ref string, inputs map[string]string) string {
		guid, err := e.store.RecordDispatch(ctx, repoID, store.DispatchRequest{Ref: ref, Inputs: inputs,
			UserID: dora.ID, UserName: dora.Name, Trusted: true})
		if err != nil {
			t.Fatal(err)
		}
		e.runOnce()
		return guid
	}
	delivery := func(guid string) (state, runID, lastError string) {
		var run *string
		if err := e.pool.QueryRow(ctx, `SELECT state, run_id, coalesce(last_error, '') FROM scm_deliveries WHERE guid = $1`, guid).
			Scan(&state, &run, &lastError); err != nil {
			t.Fatal(err)
		}
		if run != nil {
			runID = *run
		}
		return
	}
	state, runID, _ := delivery(ask("refs/heads/main", map[string]string{"target": "production"}))
	if state != "DONE" || runID == "" {
		t.Fatalf("dispatch: %s %q", state, runID)
	}
	run, err := e.store.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Trigger != "dispatch:dora" || run.GitSHA != sha || run.GitRef != "refs/heads/main" || !run.Trusted ||
		run.Inputs["target"] != "production" || run.Actor != "user:"+dora.ID {
		t.Fatalf("run %+v", run)
	}
	if n := e.count(`SELECT count(*) FROM check_runs c JOIN jobs j ON j.id = c.job_id WHERE j.run_id = $1`, runID); n != 1 {
		t.Fatalf("%d check runs", n)
	}
	for _, tc := range []struct {
		ref    string
		inputs map[string]string
		want   string
	}{
		{"refs/heads/nope", map[string]string{"target": "staging"}, "has no refs/heads/nope"},
		{"refs/heads/main", map[string]string{"target": "moon"}, `not "moon"`},
	} {
		state, runID, why := delivery(ask(tc.ref, tc.inputs))
		if state != "FAILED" || runID != "" || !strings.Contains(why, tc.want) {
			t.Errorf("%s %v: %s %q %q", tc.ref, tc.inputs, state, runID, why)
		}
	}
	// Dora loses the write role before the worker gets to her request.
	guid, err := e.store.RecordDispatch(ctx, repoID, store.DispatchRequest{Ref: "refs/heads/main",
		Inputs: map[string]string{"target": "staging"}, UserID: dora.ID, UserName: dora.Name, Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetMember(ctx, e.admin, e.project.ID, "dora", store.RoleRead, false); err != nil {
		t.Fatal(err)
	}
	e.runOnce()
	if state, runID, why := delivery(guid); runID != "" || state == "DONE" {
		t.Fatalf("a request of a member who lost the write role made a run: %s %q", state, why)
	}
}
