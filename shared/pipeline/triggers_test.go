package pipeline_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

func triggersOf(t *testing.T, on string) *pipeline.Triggers {
	t.Helper()
	p, err := pipeline.Parse("f.yml", []byte(on+"\njobs:\n  a: {steps: [{run: x}]}\n"))
	if err != nil {
		t.Fatalf("%s: %v", on, err)
	}
	return p.Triggers
}

func files(fs ...string) func() ([]string, error) {
	return func() ([]string, error) { return fs, nil }
}

// TestFilterPatterns: GitHub's filter pattern cheat sheet, pattern by
// pattern ("Workflow syntax for GitHub Actions", "Filter pattern cheat
// sheet").
func TestFilterPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern   string
		match, no []string
	}{
		{"feature/*", []string{"feature/my-branch", "feature/your-branch"}, []string{"feature/your/branch", "feature"}},
		{"feature/**", []string{"feature/beta-a/my-branch", "feature/your-branch", "feature/mona/the/octocat"}, []string{"features/x"}},
		{"main", []string{"main"}, []string{"main2", "releases/main"}},
		{"releases/mona-the-octocat", []string{"releases/mona-the-octocat"}, []string{"releases/mona"}},
		{"*", []string{"main", "releases"}, []string{"releases/v1"}},
		{"**", []string{"all/the/branches", "every/tag"}, nil},
		{"*feature", []string{"mona-feature", "feature", "ver-10-feature"}, []string{"feature-x"}},
		{"v2*", []string{"v2", "v2.0", "v2.9"}, []string{"v1.0"}},
		{"v[12].[0-9]+.[0-9]+", []string{"v1.10.1", "v2.0.0"}, []string{"v3.0.0", "v1.a.1"}},
		{"*.jsx?", []string{"page.js", "page.jsx"}, []string{"page.jsxx", "a/page.js"}},
		{"**.js", []string{"index.js", "js/index.js", "src/js/app.js"}, []string{"index.jsx"}},
		{"docs/*", []string{"docs/README.md", "docs/file.txt"}, []string{"docs/a/b.md"}},
		{"docs/**", []string{"docs/README.md", "docs/mona/octocat.txt"}, []string{"mydocs/x"}},
		{"docs/**/*.md", []string{"docs/README.md", "docs/mona/hello-world.md", "docs/a/markdown/file.md"}, []string{"docs/a.txt"}},
		{"**/docs/**", []string{"docs/hello.md", "dir/docs/my-file.txt", "space/docs/plan/space.doc"}, []string{"doc/x"}},
		{"**/README.md", []string{"README.md", "js/README.md"}, []string{"README.txt"}},
		{"**/*src/**", []string{"a/src/app.js", "my-src/code/js/app.js"}, []string{"src"}},
		{"**/*-post.md", []string{"my-post.md", "path/their-post.md"}, []string{"post.md"}},
		{"**/migrate-*.sql", []string{"migrate-10909.sql", "db/migrate-v1.0.sql", "db/sept/migrate-v1.sql"}, []string{"migrate.sql"}},
		{`\*x`, []string{"*x"}, []string{"ax"}},
		{"fix/ü*", []string{"fix/über", "fix/ü"}, []string{"fix/u"}}, // each byte of a character as it is
		{`a\*+`, []string{"a*", "a**"}, []string{"a", "ab"}},
		{"a**/b", []string{"a/b", "ax/y/b"}, []string{"ab"}},
		{"v[0-9_]", []string{"v1", "v_"}, []string{"v/", "va"}},
	} {
		tr := triggersOf(t, "on: {push: {branches: ['"+tc.pattern+"']}}")
		for _, name := range tc.match {
			if ok, why, _ := tr.RunsOnPush("refs/heads/"+name, files()); !ok {
				t.Errorf("%q does not match %q: %s", tc.pattern, name, why)
			}
		}
		for _, name := range tc.no {
			if ok, _, _ := tr.RunsOnPush("refs/heads/"+name, files()); ok {
				t.Errorf("%q matches %q", tc.pattern, name)
			}
		}
	}
}

// TestPushTriggers: GitHub's documented behaviour of on.push's filters.
func TestPushTriggers(t *testing.T) {
	cases := []struct {
		on, ref string
		changed []string
		runs    bool
	}{
		{"on: push", "refs/heads/any", nil, true},
		{"on: [push, pull_request]", "refs/tags/v1", nil, true},
		{"on: pull_request", "refs/heads/main", nil, false},
		// Branches only: tags do not run; tags only: branches do not.
		{"on: {push: {branches: [main]}}", "refs/tags/v1", nil, false},
		{"on: {push: {tags: ['v*']}}", "refs/heads/main", nil, false},
		{"on: {push: {tags: ['v*']}}", "refs/tags/v1.0", nil, true},
		{"on: {push: {tags-ignore: ['v*']}}", "refs/tags/v1.0", nil, false},
		{"on: {push: {tags-ignore: ['v*']}}", "refs/tags/beta", nil, true},
		{"on: {push: {branches: [main], tags: ['v*']}}", "refs/tags/v2", nil, true},
		// Negation: the last matching pattern decides.
		{"on: {push: {branches: ['releases/**', '!releases/**-alpha']}}", "refs/heads/releases/10", nil, true},
		{"on: {push: {branches: ['releases/**', '!releases/**-alpha']}}", "refs/heads/releases/10-alpha", nil, false},
		{"on: {push: {branches: ['releases/**', '!releases/**-alpha', 'releases/keep-alpha']}}", "refs/heads/releases/keep-alpha", nil, true},
		{"on: {push: {branches-ignore: ['mona/octocat', 'releases/**-alpha']}}", "refs/heads/releases/beta/3-alpha", nil, false},
		{"on: {push: {branches-ignore: ['mona/octocat', 'releases/**-alpha']}}", "refs/heads/main", nil, true},
		// Paths: one changed path in paths runs; paths-ignore runs unless
		// every changed path is ignored; both filters must hold.
		{"on: {push: {paths: ['**.js']}}", "refs/heads/main", []string{"README.md", "app/index.js"}, true},
		{"on: {push: {paths: ['**.js']}}", "refs/heads/main", []string{"README.md"}, false},
		{"on: {push: {paths: ['sub-project/**', '!sub-project/docs/**']}}", "refs/heads/main", []string{"sub-project/docs/a.md"}, false},
		{"on: {push: {paths: ['sub-project/**', '!sub-project/docs/**']}}", "refs/heads/main", []string{"sub-project/docs/a.md", "sub-project/x.go"}, true},
		{"on: {push: {paths-ignore: ['docs/**']}}", "refs/heads/main", []string{"docs/a.md", "docs/b/c.md"}, false},
		{"on: {push: {paths-ignore: ['docs/**']}}", "refs/heads/main", []string{"docs/a.md", "main.go"}, true},
		{"on: {push: {branches: [main], paths: ['**.go']}}", "refs/heads/dev", []string{"main.go"}, false},
		// Tags: paths are not evaluated.
		{"on: {push: {tags: ['v*'], paths: ['**.go']}}", "refs/tags/v1", []string{"README.md"}, true},
	}
	for _, tc := range cases {
		tr := triggersOf(t, tc.on)
		ok, why, err := tr.RunsOnPush(tc.ref, files(tc.changed...))
		if err != nil || ok != tc.runs {
			t.Errorf("%s, push of %s changing %v: runs %v (%s, %v), want %v", tc.on, tc.ref, tc.changed, ok, why, err, tc.runs)
		}
		if !ok && why == "" {
			t.Errorf("%s, %s: no reason", tc.on, tc.ref)
		}
	}
	// No on: every push runs; the changed paths are not asked for.
	var none *pipeline.Triggers
	if ok, _, _ := none.RunsOnPush("refs/heads/x", func() ([]string, error) { return nil, errors.New("asked") }); !ok {
		t.Error("a pipeline without on: did not run")
	}
	if _, _, err := triggersOf(t, "on: {push: {paths: [a]}}").RunsOnPush("refs/heads/x", func() ([]string, error) { return nil, errors.New("down") }); err == nil {
		t.Error("changed paths that cannot be read are not an error")
	}
}

// TestPullRequestTriggers: types (GitHub's default opened, synchronize,
// reopened), base-branch and path filters.
func TestPullRequestTriggers(t *testing.T) {
	for _, tc := range []struct {
		on, action, base string
		changed          []string
		runs             bool
	}{
		{"on: pull_request", "opened", "refs/heads/main", nil, true},
		{"on: pull_request", "labeled", "refs/heads/main", nil, false},
		{"on: {pull_request: {types: [labeled]}}", "labeled", "refs/heads/main", nil, true},
		{"on: {pull_request: {types: [labeled]}}", "opened", "refs/heads/main", nil, false},
		{"on: {pull_request: {branches: ['releases/**']}}", "synchronize", "refs/heads/releases/1", nil, true},
		{"on: {pull_request: {branches: ['releases/**']}}", "synchronize", "refs/heads/main", nil, false},
		{"on: {pull_request: {paths: ['**.go']}}", "opened", "refs/heads/main", []string{"a.md"}, false},
		{"on: {pull_request: {paths-ignore: ['**.md']}}", "opened", "refs/heads/main", []string{"a.md", "b.go"}, true},
		{"on: push", "opened", "refs/heads/main", nil, false},
	} {
		ok, why, err := triggersOf(t, tc.on).RunsOnPullRequest(tc.action, tc.base, files(tc.changed...))
		if err != nil || ok != tc.runs || !ok && why == "" {
			t.Errorf("%s, %s against %s: runs %v (%q, %v), want %v", tc.on, tc.action, tc.base, ok, why, err, tc.runs)
		}
	}
	var none *pipeline.Triggers
	if ok, _, _ := none.RunsOnPullRequest("closed", "refs/heads/main", files()); ok {
		t.Error("without on:, a closed pull request ran")
	}
	refuses(t, "on: %s\njobs:\n  a: {steps: [{run: x}]}\n", map[string]string{
		"{push: {branches: [a], branches-ignore: [b]}}": "a filter and its -ignore cannot both be given",
		"{push: {branch: [a]}}":                         `unknown key "branch"`,
		"{pull_request: {types: [merged]}}":             `unknown pull request activity "merged"`,
		"{push: {branches: ['a[']}}":                    `pattern "a["`,
		"{push: {branches: ['*+']}}":                    "must follow a character",
		"release":                                       `event "release" is not supported`,
		"{push: {branches: ['!main']}}":                 "a filter of ! patterns only matches nothing",
		"{push: {branches: []}}":                        "a filter needs at least one pattern",
		"{pull_request: {types: []}}":                   "types needs at least one activity",
		"{push: {branches: ['x[^a]y']}}":                "a [class] holds letters, digits",
	})
}

// TestConcurrency: concurrency is a group, or {group, cancel-in-progress};
// the group reads the run's facts (GitHub's usual
// ${{ github.workflow }}-${{ github.ref }}), nothing a run does not have
// when it is made.
func TestConcurrency(t *testing.T) {
	for on, want := range map[string]domain.Concurrency{
		"concurrency: deploy": {Group: "deploy"},
		"concurrency: {group: '${{ github.workflow }}-${{ github.ref }}', cancel-in-progress: true}": {Group: "${{ github.workflow }}-${{ github.ref }}", CancelInProgress: true},
		"concurrency: {group: 'pr-${{ github.head_ref || github.run_id }}'}":                         {Group: "pr-${{ github.head_ref || github.run_id }}"},
		"concurrency: {group: g, cancel-in-progress: \"${{ github.ref != 'refs/heads/main' }}\"}":    {Group: "g", CancelExpr: "${{ github.ref != 'refs/heads/main' }}"},
	} {
		p, err := pipeline.Parse("f.yml", []byte(on+"\njobs:\n  a: {steps: [{run: x}]}\n"))
		if err != nil {
			t.Fatalf("%s: %v", on, err)
		}
		if p.Concurrency == nil || *p.Concurrency != want {
			t.Errorf("%s: %+v", on, p.Concurrency)
		}
	}
	refuses(t, "%s\njobs:\n  a: {steps: [{run: x}]}\n", map[string]string{
		"concurrency: {cancel-in-progress: true}":                              "group is required",
		"concurrency: '${{ steps.a.outputs.x }}'":                              `context "steps" is not available here`,
		"concurrency: '${{ github.event.number }}'":                            "github.event is not available",
		"concurrency: {group: g, cancel: true}":                                `unknown key "cancel"`,
		"concurrency: {group: g, cancel-in-progress: 'x-${{ github.ref }}'}":   "is true, false or one ${{ }} expression",
		"concurrency: {group: g, cancel-in-progress: '${{ needs.a.result }}'}": `context "needs" is not available here`,
	})
	refuses(t, "jobs:\n  b: {steps: [{run: x}]}\n  a:\n    needs: b\n    strategy: {matrix: {env: [x]}}\n    %s\n    steps: [{run: x}]\n", map[string]string{
		"concurrency: '${{ steps.a.outputs.x }}'":            `context "steps" is not available here`,
		"concurrency: '${{ needs.c.result }}'":               `job "c" is not in this job's needs`,
		"concurrency: '${{ matrix.os }}'":                    `matrix has no axis "os"`,
		"concurrency: '${{ secrets.TOKEN }}'":                `context "secrets" is not available here`,
		"concurrency: {group: '', cancel-in-progress: true}": "1 to 400 characters",
	})
}

// TestJobConcurrency: a job's group reads the run's facts, its needs and
// its matrix combination; the parser fills in the matrix, the control
// plane the rest when the job's needs have ended.
func TestJobConcurrency(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`jobs:
  build: {steps: [{run: x}]}
  deploy:
    needs: build
    strategy: {matrix: {env: [staging, production]}}
    concurrency: {group: 'deploy-${{ matrix.env }}-${{ needs.build.result }}', cancel-in-progress: "${{ matrix.env == 'staging' }}"}
    steps: [{run: x}]
  plain:
    concurrency: '${{ github.ref }}'
    steps: [{run: x}]
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]domain.Concurrency{}
	for _, j := range p.Jobs {
		if j.Concurrency != nil {
			got[j.Name] = *j.Concurrency
		}
		if j.ReadsNeeds {
			t.Errorf("%s: a group's needs are not the runner's to read", j.Name)
		}
	}
	want := map[string]domain.Concurrency{
		"deploy (staging)":    {Group: "deploy-staging-${{ needs.build.result }}", CancelExpr: "true"},
		"deploy (production)": {Group: "deploy-production-${{ needs.build.result }}", CancelExpr: "false"},
		"plain":               {Group: "${{ github.ref }}"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}

// TestDispatchInputs: workflow_dispatch's typed inputs as GitHub's: the
// types, defaults and required; a manual run's given values are checked
// and typed, every problem said at once.
func TestDispatchInputs(t *testing.T) {
	tr := triggersOf(t, `on:
  workflow_dispatch:
    inputs:
      environment: {type: choice, options: [staging, production], default: staging}
      dry-run: {type: boolean, default: "true"}
      replicas: {type: number, required: true}
      note: {description: free text}
`)
	got, err := tr.DispatchInputs(map[string]string{"replicas": "3", "environment": "production"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"environment": "production", "dry-run": true, "replicas": 3.0, "note": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("inputs %v, want %v", got, want)
	}
	_, err = tr.DispatchInputs(map[string]string{"environment": "prod", "dry-run": "maybe", "colour": "red"})
	for _, w := range []string{"input replicas is required", "input environment is one of staging, production, not \"prod\"",
		"input dry-run is a boolean", "the pipeline has no input colour"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in %v", w, err)
		}
	}
	if _, err := triggersOf(t, "on: push").DispatchInputs(nil); err == nil || !strings.Contains(err.Error(), "has no workflow_dispatch") {
		t.Errorf("a pipeline without workflow_dispatch: %v", err)
	}
	var none *pipeline.Triggers
	if in, err := none.DispatchInputs(nil); err != nil || len(in) != 0 {
		t.Errorf("a pipeline without on:: %v %v", in, err)
	}
	refuses(t, "on:\n  workflow_dispatch:\n    inputs:\n      %s\njobs:\n  a: {steps: [{run: x}]}\n", map[string]string{
		"x: {type: choice}":                           "a choice needs options",
		"x: {type: string, options: [a]}":             "only a choice has options",
		"x: {type: boolean, default: yes}":            "is a boolean",
		"x: {type: color}":                            "type is string, boolean, choice or number",
		"x: {type: choice, options: [a], default: b}": `one of a, not "b"`,
		"x: {type: number, default: NaN}":             "is a number",
		"1x: {}":                                      `input name "1x"`,
	})
}

// TestSchedules: on.schedule is a list of five-field crons (UTC), each
// with what to do with a slot missed while ForgeCI was down.
func TestSchedules(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte("on:\n  schedule:\n    - cron: '30  5 * * 1-5'\n    - {cron: '*/15 * * * *', missed: skip}\njobs:\n  a: {steps: [{run: x}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.Schedule{{Cron: "30 5 * * 1-5", Missed: "run-once"}, {Cron: "*/15 * * * *", Missed: "skip"}}
	if fmt.Sprint(p.Schedules()) != fmt.Sprint(want) {
		t.Fatalf("schedules %v", p.Schedules())
	}
	if p2, _ := pipeline.Parse("f.yml", []byte("jobs:\n  a: {steps: [{run: x}]}\n")); p2.Schedules() == nil || len(p2.Schedules()) != 0 {
		t.Fatalf("a pipeline without schedules: %v", p2.Schedules())
	}
	refuses(t, "on:\n  schedule: %s\njobs:\n  a: {steps: [{run: x}]}\n", map[string]string{
		"[{cron: '@daily'}]":                         "is five fields",
		"[{cron: '61 * * * *'}]":                     `cron "61 * * * *"`,
		"[{cron: '0 3 * * *', missed: later}]":       "missed is run-once",
		"[{cron: '0 3 * * *'}, {cron: '0 3 * * *'}]": "is listed twice",
		"[{missed: skip}]":                           "cron is required",
		"[]":                                         "schedule holds 1 to 20 entries",
		"[{cron: '* * * * *'}]":                      "more often than every 5 minutes",
		"[{cron: '0 0 30 2 *'}]":                     "never fires",
	})
}
