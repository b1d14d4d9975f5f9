package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/store"
)

const dispatchYAML = `on:
  push: {branches: [main]}
  workflow_dispatch:
    inputs:
      target: {type: choice, options: [staging, production], required: true}
      dry-run: {type: boolean, default: "true"}
jobs:
  deploy:
    if: inputs.target == 'production' && !inputs.dry-run
    steps: [{run: ./deploy}]
  plan:
    steps: [{run: "echo ${{ inputs.target }}"}]
`

// TestDispatch: a manual run re-runs the newest snapshot submitted for
// the ref, with the inputs its pipeline declares, checked and typed; in
// the caller's tier; triggered as dispatch:<user>; every problem refused
// with a clear error and nothing made.
func TestDispatch(t *testing.T) {
	e := setup(t)
	sam := e.member("sam", e.project.ID, store.RoleWrite, true)
	walter := e.member("walter", e.project.ID, store.RoleWrite, false)
	src := e.uploadPipeline(dispatchYAML)
	for _, branch := range []string{"dev", "main"} {
		if code, body := e.post("/v1/runs", sam, map[string]any{"project": "acme/app", "source": src, "branch": branch}); code != 201 {
			t.Fatalf("submit from %s: %d %s", branch, code, body)
		}
	}
	path := "/v1/projects/" + e.project.ID + "/dispatch"
	code, body := e.post(path, sam, map[string]any{"ref": "main", "inputs": map[string]string{"target": "production", "dry-run": "false"}})
	if code != 201 {
		t.Fatalf("dispatch: %d %s", code, body)
	}
	var run struct {
		ID, Trigger, State string
		GitRef             string         `json:"git_ref"`
		Inputs             map[string]any `json:"inputs"`
		Trusted            bool
	}
	_ = json.Unmarshal(body, &run)
	if run.Trigger != "dispatch:sam" || run.GitRef != "refs/heads/main" || !run.Trusted ||
		run.Inputs["target"] != "production" || run.Inputs["dry-run"] != false {
		t.Fatalf("run %s", body)
	}
	// The job's facts carry the event and the inputs; its if: held.
	var facts domain.RunFacts
	if err := e.pool.QueryRow(context.Background(), `SELECT spec->'run' FROM jobs WHERE run_id = $1 AND name = 'plan'`, run.ID).Scan(&facts); err != nil {
		t.Fatal(err)
	}
	if facts.EventName != "workflow_dispatch" || facts.Inputs["target"] != "production" {
		t.Fatalf("facts %+v", facts)
	}
	if st := e.jobStateByName(run.ID, "deploy"); st == "SKIPPED" {
		t.Fatalf("deploy %s: its if: reads the inputs", st)
	}
	runs := func() (n int) {
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&n)
		return n
	}
	before := runs()
	for _, tc := range []struct {
		token string
		req   map[string]any
		code  int
		want  string
	}{
		{sam, map[string]any{"ref": "main", "inputs": map[string]string{"target": "prod", "colour": "red"}}, 400, `input target is one of staging, production, not \"prod\"; the pipeline has no input colour`},
		{sam, map[string]any{"ref": "main"}, 400, "input target is required"},
		{sam, map[string]any{"ref": "release"}, 404, "no snapshot of refs/heads/release"},
		{sam, map[string]any{"ref": "../x"}, 400, "field ref must be a branch"},
		{walter, map[string]any{"ref": "main", "inputs": map[string]string{"target": "staging"}}, 404, "in your tier (untrusted, your own)"},
	} {
		code, body := e.post(path, tc.token, tc.req)
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("%v: %d %s, want %d %q", tc.req, code, body, tc.code, tc.want)
		}
	}
	if after := runs(); after != before {
		t.Fatalf("refused dispatches made %d runs", after-before)
	}
	// A pipeline without workflow_dispatch in its on: is not run by hand.
	src = e.uploadPipeline("on: push\njobs:\n  a: {steps: [{run: x}]}\n")
	if code, body := e.post("/v1/runs", sam, map[string]any{"project": "acme/app", "source": src, "branch": "main"}); code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	if code, body := e.post(path, sam, map[string]any{"ref": "main"}); code != 400 || !strings.Contains(string(body), "has no workflow_dispatch") {
		t.Fatalf("dispatch of a push-only pipeline: %d %s", code, body)
	}
}

// TestDispatchAsksTheSnapshotsAuthor: a manual run of main runs the
// newest snapshot submitted from main again, with the secrets; once its
// author has lost the secrets permission (or the project), another
// member's manual run is refused rather than run that code as theirs.
func TestDispatchAsksTheSnapshotsAuthor(t *testing.T) {
	e := setup(t)
	sam := e.member("sam", e.project.ID, store.RoleWrite, true)
	sue := e.member("sue", e.project.ID, store.RoleWrite, true)
	src := e.uploadPipeline(dispatchYAML)
	if code, body := e.post("/v1/runs", sam, map[string]any{"project": "acme/app", "source": src, "branch": "main"}); code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	path := "/v1/projects/" + e.project.ID + "/dispatch"
	req := map[string]any{"ref": "main", "inputs": map[string]string{"target": "staging"}}
	if code, body := e.post(path, sue, req); code != 201 {
		t.Fatalf("dispatch of sam's snapshot while sam may: %d %s", code, body)
	}
	e.exec(`UPDATE project_members SET secrets = false WHERE user_id = (SELECT id FROM users WHERE name = 'sam')`)
	var before, after int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&before)
	// The newest run of main is sue's manual run: the snapshot is still
	// sam's; and a retry of either runs sam's code again too.
	if code, body := e.post(path, sue, req); code != 403 || !strings.Contains(string(body), "its snapshot was submitted by a member who no longer has the secrets permission") {
		t.Fatalf("dispatch of the snapshot of a member without the secrets permission: %d %s", code, body)
	}
	var runIDs []string
	rows, err := e.pool.Query(context.Background(), `SELECT id FROM runs`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		runIDs = append(runIDs, id)
	}
	if len(runIDs) != before {
		t.Fatalf("%d runs listed, %d counted", len(runIDs), before)
	}
	for _, id := range runIDs {
		e.exec(`UPDATE runs SET state = 'FAILED', finished_at = now() WHERE id = $1`, id)
		if code, body := e.post("/v1/runs/"+id+"/retry", sue, nil); code != 403 || !strings.Contains(string(body), "no longer has the secrets permission") {
			t.Fatalf("retry of a run of sam's snapshot: %d %s", code, body)
		}
	}
	e.exec(`DELETE FROM project_members WHERE user_id = (SELECT id FROM users WHERE name = 'sam')`)
	if code, body := e.post(path, sue, req); code != 403 || !strings.Contains(string(body), "may no longer start runs") {
		t.Fatalf("dispatch of the snapshot of a former member: %d %s", code, body)
	}
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&after)
	if after != before {
		t.Fatalf("refused dispatches made %d runs", after-before)
	}
	// A snapshot of sue's own is hers to run again.
	if code, body := e.post("/v1/runs", sue, map[string]any{"project": "acme/app", "source": src, "branch": "main"}); code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	if code, body := e.post(path, sue, req); code != 201 {
		t.Fatalf("dispatch of sue's snapshot: %d %s", code, body)
	}
}

// uploadPipeline puts a snapshot holding the pipeline into acme/app's
// tiers (trusted when none are named) and returns its source.
func (e *env) uploadPipeline(yml string, tiers ...bool) domain.Source {
	e.t.Helper()
	dir := e.t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".forgeci.yml"), []byte(yml), 0o644); err != nil {
		e.t.Fatal(err)
	}
	tree, err := snapshot.DirTree(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	var blob bytes.Buffer
	res, err := snapshot.Write(&blob, tree)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(tiers) == 0 {
		tiers = []bool{true}
	}
	for _, trusted := range tiers {
		if err := e.cas.Put(context.Background(), cas.BlobKey(e.project.ID, trusted, res.BlobDigest), res.BlobDigest,
			bytes.NewReader(blob.Bytes()), res.Size); err != nil {
			e.t.Fatal(err)
		}
	}
	return domain.Source{BlobDigest: res.BlobDigest, ManifestDigest: res.ManifestDigest, Size: res.Size}
}

func (e *env) jobStateByName(runID, name string) string {
	e.t.Helper()
	var st string
	if err := e.pool.QueryRow(context.Background(), `SELECT state FROM jobs WHERE run_id = $1 AND name = $2`, runID, name).Scan(&st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// TestProjectPageSchedules: the project page shows each schedule (of the
// default branch's pipeline) with its next slot and its last firing: the
// run it made and how late, or why it was skipped.
func TestProjectPageSchedules(t *testing.T) {
	f := newTenancy(t)
	ctx := context.Background()
	file := "on:\n  schedule: [{cron: '0 3 * * *'}, {cron: '30 4 * * 1', missed: skip}]\njobs:\n  a: {steps: [{run: x}]}\n"
	pl, err := pipeline.Parse("f.yml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	// acme/app is on GitHub: its schedules follow its pushes to main.
	if err := f.store.SetRepoSchedules(ctx, f.project.ID, 5, "refs/heads/main", pl.Schedules()); err != nil {
		t.Fatal(err)
	}
	run, err := f.store.CreateRun(ctx, store.NewRun{Project: "acme/app", GitRef: "refs/heads/main", Actor: "github:1", Jobs: pl.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	f.exec(`INSERT INTO schedule_firings (project_id, cron, slot, fired_at, run_id) VALUES ($1, '0 3 * * *', '2026-12-01 03:00Z', '2026-12-01 03:00:42Z', $2)`, f.project.ID, run.ID)
	f.exec(`INSERT INTO schedule_firings (project_id, cron, slot, fired_at, skipped, note) VALUES ($1, '30 4 * * 1', '2026-11-30 04:30Z', '2026-11-30 06:00Z', true, 'missed by 1h30m0s (missed: skip)')`, f.project.ID)
	code, body := f.call("GET", "/projects/"+f.project.ID, f.readerA, nil, true)
	if code != 200 {
		t.Fatalf("project page: %d", code)
	}
	for _, want := range []string{"<code>0 3 * * *</code>", "run-once", "2026-12-01 03:00:00Z", `<a href="/runs/` + run.ID + `">fired</a> 42s late`,
		"<code>30 4 * * 1</code>", "skipped (missed by 1h30m0s (missed: skip))"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if code, body := f.call("GET", "/projects/"+f.project.ID, f.memberB, nil, true); code != 404 || strings.Contains(body, "0 3 * * *") {
		t.Errorf("another project's member: %d", code)
	}
}

// TestGitHubProjectRefs: only GitHub states a GitHub project's refs: a
// submit's branch is not its run's ref there (it is in a project fed by
// forgeci submit, TestDispatch).
func TestGitHubProjectRefs(t *testing.T) {
	f := newTenancy(t)
	code, body := f.call("POST", "/v1/runs", f.trustedWriter, map[string]any{"project": "acme/app", "source": f.source, "branch": "main"}, false)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	var run struct {
		GitRef string `json:"git_ref"`
	}
	_ = json.Unmarshal([]byte(body), &run)
	if run.GitRef != "" {
		t.Fatalf("a submit to a GitHub project claimed ref %q", run.GitRef)
	}
}

// TestRunArtifacts: a run's readers list its artifacts (size, digest,
// when they go) and get a presigned download of one, whose bytes are the
// artifact's.
func TestRunArtifacts(t *testing.T) {
	f := newTenancy(t)
	code, body := f.call("GET", "/v1/runs/"+f.done.ID+"/artifacts", f.readerA, nil, false)
	var list struct{ Artifacts []store.ArtifactInfo }
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Artifacts) != 1 {
		t.Fatalf("list: %d %s", code, body)
	}
	a := list.Artifacts[0]
	if a.Job != "finished" || a.Name != "report" || a.Size != int64(len("a report")) || a.ExpiresAt == nil ||
		a.ExpiresAt.Before(time.Now().Add(89*24*time.Hour)) {
		t.Fatalf("artifact %+v", a)
	}
	code, body = f.call("GET", "/v1/runs/"+f.done.ID+"/jobs/"+a.JobID+"/artifacts/report", f.readerA, nil, false)
	var dl struct {
		URL, Digest string
		Size        int64
	}
	if err := json.Unmarshal([]byte(body), &dl); code != 200 || err != nil || dl.Digest != a.Digest {
		t.Fatalf("download: %d %s", code, body)
	}
	resp, err := http.Get(dl.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if string(got) != "a report" || resp.Header.Get("Content-Disposition") != "attachment; filename*=UTF-8''report.tar.zst" {
		t.Fatalf("downloaded %q as %q", got, resp.Header.Get("Content-Disposition"))
	}
	if code, _ := f.call("GET", "/v1/runs/"+f.done.ID+"/jobs/"+a.JobID+"/artifacts/nope", f.readerA, nil, false); code != 404 {
		t.Fatalf("an artifact that is not there: %d", code)
	}
}
