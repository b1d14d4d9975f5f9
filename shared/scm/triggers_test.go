package scm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/scm/fakegithub"
)

const triggersYAML = `on:
  push:
    branches: [main]
    paths: ['src/**', '.forgeci.yml']
  pull_request:
    paths-ignore: ['docs/**']
jobs:
  build:
    runs-on: [linux]
    steps: [{run: ./build.sh}]
`

// push is a push payload for ref from before to after whose commits
// changed modified (nil: the payload lists no commits).
func push(ref, before, after string, modified []string) []byte {
	return pushForced(ref, before, after, modified, false)
}

func pushForced(ref, before, after string, modified []string, forced bool) []byte {
	var commits []any
	if modified != nil {
		commits = []any{map[string]any{"id": after, "modified": modified, "added": []string{}, "removed": []string{}}}
	}
	b, _ := json.Marshal(map[string]any{
		"ref": ref, "before": before, "after": after, "deleted": false, "forced": forced, "commits": commits,
		"pusher": map[string]any{"name": "octo"}, "sender": map[string]any{"id": 31, "login": "octo"},
		"repository": map[string]any{"id": repoID, "full_name": repoName, "name": "hello", "default_branch": "main",
			"owner": map[string]any{"login": "octo"}},
		"installation": map[string]any{"id": installID},
	})
	return b
}

func prEvent(action, sha string, number int) []byte {
	var m map[string]any
	_ = json.Unmarshal(prPayload(sha, number, repoID), &m)
	m["action"] = action
	b, _ := json.Marshal(m)
	return b
}

// TestTriggersChooseDeliveries: a replayed sequence of pushes and pull
// request activities against a pipeline with on: filters makes runs for
// exactly those GitHub would run it for; each other delivery is recorded
// IGNORED with the reason.
func TestTriggersChooseDeliveries(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, triggersYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	before := strings.Repeat("a", 40)
	zero := strings.Repeat("0", 40)
	e.gh.AddComparison(repoName, "main", sha, []string{"src/main.go"})
	e.gh.AddPullRequest(fakegithub.PullRequest{Number: 7, BaseRepoID: repoID, BaseFullName: repoName, BaseRef: "main",
		HeadRepoID: repoID, HeadFullName: repoName, HeadRef: "docs", HeadSHA: sha, UserID: 31, UserLogin: "octo",
		Files: []string{"docs/a.md", "docs/b.md"}})
	e.gh.AddPullRequest(fakegithub.PullRequest{Number: 8, BaseRepoID: repoID, BaseFullName: repoName, BaseRef: "main",
		HeadRepoID: repoID, HeadFullName: repoName, HeadRef: "code", HeadSHA: sha, UserID: 31, UserLogin: "octo",
		Files: append(manyDocs(150), "src/main.go")})
	steps := []struct {
		event string
		body  []byte
		run   bool
		why   string
	}{
		{"push", push("refs/heads/dev", before, sha, []string{"src/main.go"}), false, "branch dev is not in on.push's branches"},
		{"push", push("refs/tags/v1", before, sha, []string{"src/main.go"}), false, "on.push filters branches only"},
		{"push", push("refs/heads/main", before, sha, []string{"docs/readme.md"}), false, "no changed path (of 1) is in on.push's paths"},
		{"push", push("refs/heads/main", before, sha, []string{"docs/readme.md", "src/main.go"}), true, ""},
		{"push", push("refs/heads/main", zero, sha, nil), true, ""}, // a new branch: compared with the default branch
		// A force push dropped commits whose paths nobody lists: it runs.
		{"push", pushForced("refs/heads/main", before, sha, []string{"docs/readme.md"}, true), true, ""},
		{"pull_request", prEvent("opened", sha, 7), false, "no changed path (of 2) is outside on.pull_request's paths-ignore"},
		{"pull_request", prEvent("labeled", sha, 8), false, "pull request labeled is not in on.pull_request's types"},
		{"pull_request", prEvent("synchronize", sha, 8), true, ""}, // the files route, paged past 100
		{"pull_request", prEvent("merged", sha, 8), false, "pull request merged"},
	}
	for i, st := range steps {
		guid := fmt.Sprintf("guid-trigger-%d", i)
		if code, out := e.deliver(st.event, guid, st.body, sign(repoSecret, st.body)); code != http.StatusAccepted {
			t.Fatalf("step %d: deliver %d %v", i, code, out)
		}
		res := e.runOnce()
		var state, note string
		var runID *string
		if err := e.pool.QueryRow(context.Background(), `SELECT state, coalesce(note, ''), run_id FROM scm_deliveries WHERE guid = $1`, guid).
			Scan(&state, &note, &runID); err != nil {
			t.Fatal(err)
		}
		if st.run != (runID != nil) || res.Runs != map[bool]int{true: 1}[st.run] {
			t.Errorf("step %d (%s): state %s, run %v, note %q, want a run: %v", i, st.event, state, runID != nil, note, st.run)
		}
		if !st.run && !strings.Contains(note, st.why) {
			t.Errorf("step %d: note %q, want %q", i, note, st.why)
		}
	}
	// The pipeline file was read alone first: only the deliveries that
	// made a run downloaded the tree.
	if n := e.gh.CountCalls("GET", "/repos/"+repoName+"/tarball"); n != 4 {
		t.Errorf("%d tarball downloads for 4 runs", n)
	}
}

// TestPassedOverWithoutCallingGitHub: a deleted branch's push and a pull
// request activity no trigger can name make no run and no call to GitHub
// (no installation token, no repository lookup).
func TestPassedOverWithoutCallingGitHub(t *testing.T) {
	e := setup(t)
	zero := strings.Repeat("0", 40)
	var deletion map[string]any
	_ = json.Unmarshal(push("refs/heads/gone", strings.Repeat("a", 40), zero, nil), &deletion)
	deletion["deleted"] = true
	body, _ := json.Marshal(deletion)
	for i, d := range []struct {
		event string
		body  []byte
		why   string
	}{{"push", body, "branch or tag deleted"}, {"pull_request", prEvent("merged", zero, 9), "pull request merged"}} {
		guid := fmt.Sprintf("guid-passed-over-%d", i)
		if code, out := e.deliver(d.event, guid, d.body, sign(repoSecret, d.body)); code != http.StatusAccepted {
			t.Fatalf("deliver %d %v", code, out)
		}
		calls := len(e.gh.Calls())
		if res := e.runOnce(); res.Ignored != 1 {
			t.Fatalf("%s: %+v, want it ignored", d.event, res)
		}
		if n := len(e.gh.Calls()) - calls; n != 0 {
			t.Errorf("%s (%s): %d calls to GitHub: %v", d.event, d.why, n, e.gh.Calls()[calls:])
		}
		if n := e.count(`SELECT count(*) FROM scm_deliveries WHERE guid = $1 AND note = $2`, guid, d.why); n != 1 {
			t.Errorf("%s: not ignored as %q", d.event, d.why)
		}
	}
}

func manyDocs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("docs/%03d.md", i))
	}
	return out
}

// TestWorkflowTriggers: each realistic workflow of the end-to-end suite,
// committed to a repository, gets the deliveries its triggers.txt lists
// (pushes of branches and tags, pull request activities, with the paths
// they change) and makes a run for exactly those the file says GitHub
// would run it for.
func TestWorkflowTriggers(t *testing.T) {
	dirs, err := filepath.Glob("../../runner/e2e/testdata/workflows/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no workflows: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			e := setup(t)
			repo := t.TempDir()
			if err := os.CopyFS(repo, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			git(t, repo, "init", "-q", "-b", "main")
			git(t, repo, "add", "-A")
			git(t, repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")
			sha := strings.TrimSpace(git(t, repo, "rev-parse", "HEAD"))
			e.gh.AddGitCommit(t, repoName, repo, sha)
			lines, err := os.ReadFile(filepath.Join(dir, "triggers.txt"))
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
				if strings.HasPrefix(line, "#") {
					continue
				}
				e.replay(t, i, line, sha)
			}
		})
	}
}

// replay delivers one line of a triggers.txt ("push REF PATHS... -> run"
// or "pull_request ACTION PATHS... -> skip") and checks its effect.
func (e *env) replay(t *testing.T, i int, line, sha string) {
	t.Helper()
	what, want, ok := strings.Cut(line, " -> ")
	f := strings.Fields(what)
	if !ok || len(f) < 2 {
		t.Fatalf("line %q", line)
	}
	var body []byte
	switch f[0] {
	case "push":
		body = push(f[1], strings.Repeat("b", 40), sha, f[2:])
	case "pull_request":
		e.gh.AddPullRequest(fakegithub.PullRequest{Number: 100 + i, BaseRepoID: repoID, BaseFullName: repoName, BaseRef: "main",
			HeadRepoID: repoID, HeadFullName: repoName, HeadRef: "topic", HeadSHA: sha, UserID: 31, UserLogin: "octo", Files: f[2:]})
		body = prEvent(f[1], sha, 100+i)
	}
	guid := fmt.Sprintf("replay-%d", i)
	if code, out := e.deliver(f[0], guid, body, sign(repoSecret, body)); code != http.StatusAccepted {
		t.Fatalf("%s: deliver %d %v", line, code, out)
	}
	e.runOnce()
	var state, note string
	if err := e.pool.QueryRow(context.Background(), `SELECT state, coalesce(note, '') FROM scm_deliveries WHERE guid = $1`, guid).Scan(&state, &note); err != nil {
		t.Fatal(err)
	}
	if got := map[string]string{"DONE": "run", "IGNORED": "skip"}[state]; got != want {
		t.Errorf("%s: delivery %s (%s)", line, state, note)
	}
}
