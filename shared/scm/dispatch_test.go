package scm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
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

// TestGitHubSchedules: a GitHub project's schedules follow every push to
// its default branch, even one its on: takes no run for; a firing asks
// the worker, which resolves the branch through GitHub then and makes a
// trusted run of its newest commit, mirrored to check runs.
func TestGitHubSchedules(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	dir, sha := gitRepo(t, "on:\n  schedule: [{cron: '17 3 * * *'}]\n  workflow_dispatch:\njobs:\n  nightly:\n    runs-on: [linux]\n    steps: [{run: ./build.sh}]\n")
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.gh.AddRef(repoName, "refs/heads/main", sha)
	body := pushForced("refs/heads/main", strings.Repeat("b", 40), sha, []string{"build.sh"}, false)
	if code, out := e.deliver("push", "guid-schedule-push", body, sign(repoSecret, body)); code != 202 {
		t.Fatalf("deliver: %d %v", code, out)
	}
	if res := e.runOnce(); res.Runs != 0 || res.Ignored != 1 {
		t.Fatalf("a push the pipeline's on: has no trigger for: %+v", res)
	}
	if n := e.count(`SELECT count(*) FROM schedules WHERE cron = '17 3 * * *' AND template_run_id IS NULL AND ref = 'refs/heads/main'`); n != 1 {
		t.Fatalf("the default branch's schedule: %d", n)
	}
	// A day passed since the schedule was made: its 03:17 slot is due.
	if _, err := e.pool.Exec(ctx, `UPDATE schedules SET created_at = now() - interval '1 day 1 minute'`); err != nil {
		t.Fatal(err)
	}
	res, err := e.store.FireSchedules(ctx)
	if err != nil || res.Fired != 1 {
		t.Fatalf("fire: %+v %v", res, err)
	}
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("the worker made %+v", res)
	}
	run := e.onlyRun()
	if run.Trigger != "schedule: 17 3 * * *" || run.GitSHA != sha || run.GitRef != "refs/heads/main" || !run.Trusted {
		t.Fatalf("scheduled run %+v", run)
	}
	if n := e.count(`SELECT count(*) FROM check_runs c JOIN jobs j ON j.id = c.job_id WHERE j.run_id = $1`, run.ID); n != 1 {
		t.Fatalf("%d check runs", n)
	}
	if res, err := e.store.FireSchedules(ctx); err != nil || res.Fired != 0 {
		t.Fatalf("the same slot again: %+v %v", res, err)
	}
	if n := e.count(`SELECT count(*) FROM schedule_firings WHERE run_id = $1 AND note LIKE 'delivery schedule-%'`, run.ID); n != 1 {
		t.Fatal("the firing does not name its delivery and run")
	}

	// main moves on to a pipeline without the schedule; the older push,
	// processed again late, does not put the schedule back (it is not the
	// head); a firing meanwhile finds the head without it, makes no run,
	// and the schedules follow the head.
	dir2, sha2 := gitRepo(t, "on: workflow_dispatch\njobs:\n  other:\n    runs-on: [linux]\n    steps: [{run: ./build.sh}]\n")
	e.gh.AddGitCommit(t, repoName, dir2, sha2)
	e.gh.AddRef(repoName, "refs/heads/main", sha2)
	late := pushForced("refs/heads/main", strings.Repeat("c", 40), sha, []string{"build.sh"}, false)
	if code, out := e.deliver("push", "guid-schedule-late", late, sign(repoSecret, late)); code != 202 {
		t.Fatalf("deliver: %d %v", code, out)
	}
	e.runOnce()
	if _, err := e.pool.Exec(ctx, `DELETE FROM schedule_firings`); err != nil {
		t.Fatal(err)
	}
	if res, err := e.store.FireSchedules(ctx); err != nil || res.Fired != 1 {
		t.Fatalf("fire again: %+v %v", res, err)
	}
	if res := e.runOnce(); res.Runs != 0 || res.Ignored != 1 {
		t.Fatalf("a firing of a schedule the head dropped: %+v", res)
	}
	if n := e.count(`SELECT count(*) FROM schedules`); n != 0 {
		t.Fatalf("%d schedules left after the head dropped them", n)
	}
	later := pushForced("refs/heads/main", strings.Repeat("d", 40), sha, []string{"build.sh"}, false)
	if code, out := e.deliver("push", "guid-schedule-later", later, sign(repoSecret, later)); code != 202 {
		t.Fatalf("deliver: %d %v", code, out)
	}
	e.runOnce()
	if n := e.count(`SELECT count(*) FROM schedules`); n != 0 {
		t.Fatalf("a push of a commit that is no longer the head put %d schedules back", n)
	}
}

// TestGitHubSchedulesFollowTheRepository: a schedule belongs to the
// repository whose default branch set it: a firing after the default
// branch was renamed runs the new one (and the schedule follows it); a
// second repository of the project keeps its own schedules, and a
// repository linked to another project takes its schedules with it.
func TestGitHubSchedulesFollowTheRepository(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	dir, sha := gitRepo(t, "on:\n  schedule: [{cron: '17 3 * * *'}]\njobs:\n  nightly:\n    runs-on: [linux]\n    steps: [{run: ./build.sh}]\n")
	e.gh.AddGitCommit(t, repoName, dir, sha)
	e.gh.AddRef(repoName, "refs/heads/main", sha)
	body := pushForced("refs/heads/main", strings.Repeat("b", 40), sha, []string{"build.sh"}, false)
	if code, out := e.deliver("push", "guid-rename-push", body, sign(repoSecret, body)); code != 202 {
		t.Fatalf("deliver: %d %v", code, out)
	}
	e.runOnce()
	if n := e.count(`SELECT count(*) FROM schedules WHERE repository_id = $1 AND ref = 'refs/heads/main'`, repoID); n != 1 {
		t.Fatalf("the schedule of main: %d", n)
	}
	// main is renamed trunk on GitHub; no push comes.
	e.gh.SetDefaultBranch(repoName, "trunk")
	e.gh.AddRef(repoName, "refs/heads/trunk", sha)
	if _, err := e.pool.Exec(ctx, `UPDATE schedules SET created_at = now() - interval '1 day 1 minute'`); err != nil {
		t.Fatal(err)
	}
	if res, err := e.store.FireSchedules(ctx); err != nil || res.Fired != 1 {
		t.Fatalf("fire: %+v %v", res, err)
	}
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("the worker made %+v", res)
	}
	if run := e.onlyRun(); run.GitRef != "refs/heads/trunk" || run.GitSHA != sha {
		t.Fatalf("the scheduled run after the rename: %s %s", run.GitRef, run.GitSHA)
	}
	if n := e.count(`SELECT count(*) FROM schedules WHERE ref = 'refs/heads/trunk'`); n != 1 {
		t.Fatalf("the schedule did not follow the rename: %d", n)
	}

	// A second repository of the project sets its own schedule; the
	// first's next push leaves it alone.
	if err := e.store.AddRepository(ctx, store.Repository{GitHubID: 77, FullName: "octo/other",
		InstallationID: installID, WebhookSecret: repoSecret, Project: "hello"}); err != nil {
		t.Fatal(err)
	}
	e.gh.AddRepository(77, "octo/other")
	project := e.onlyRun().ProjectID
	if err := e.store.SetRepoSchedules(ctx, project, 77, "refs/heads/main", []domain.Schedule{{Cron: "0 5 * * *", Missed: "run-once"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetRepoSchedules(ctx, project, repoID, "refs/heads/trunk", nil); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM schedules WHERE repository_id = 77 AND cron = '0 5 * * *'`); n != 1 {
		t.Fatalf("the first repository's schedules took the second's: %d left", n)
	}
	if n := e.count(`SELECT count(*) FROM schedules WHERE repository_id = $1`, repoID); n != 0 {
		t.Fatalf("the first repository's dropped schedule: %d", n)
	}
	// Linked to another project, the second takes its schedule along.
	if _, err := e.pool.Exec(ctx, `INSERT INTO projects (id, name) VALUES ('p-else', 'else')`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE scm_repositories SET project_id = 'p-else' WHERE github_id = 77`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.FireSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM schedules`); n != 0 {
		t.Fatalf("%d schedules left of a repository that moved", n)
	}
}
