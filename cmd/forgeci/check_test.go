package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestCheckPrintsTheJobs: check parses a pipeline offline (no server, no
// token) and prints the jobs it makes: matrix combinations, needs,
// runs-on, steps and the runner features each needs; a directory means
// its .forgeci.yml; --json prints the same as data.
func TestCheckPrintsTheJobs(t *testing.T) {
	t.Setenv("FORGECI_URL", "")
	t.Setenv("FORGECI_TOKEN", "")
	dir := t.TempDir()
	src := `jobs:
  build:
    runs-on: linux
    strategy: {matrix: {go: ["1.25", "1.26"]}}
    steps:
      - uses: actions/checkout@v4
      - {id: v, run: go version}
  ship:
    needs: build
    runs-on: [linux, deploy]
    steps: [{run: echo ship}]
`
	if err := os.WriteFile(filepath.Join(dir, ".forgeci.yml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := cliOutput(t, "--config", filepath.Join(dir, "none.json"), "check", dir)
	for _, want := range []string{"ok, 3 job(s)", "build (1.25)", "build (1.26)", "ship ", "linux,deploy", "steps"} {
		if !strings.Contains(out, want) {
			t.Errorf("check's output lacks %q:\n%s", want, out)
		}
	}
	var jobs []checkedJob
	if err := json.Unmarshal([]byte(cliOutput(t, "--json", "check", filepath.Join(dir, ".forgeci.yml"))), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3 || jobs[2].Name != "ship" || strings.Join(jobs[2].Needs, ",") != "build (1.25),build (1.26)" ||
		jobs[0].Steps != 2 || strings.Join(jobs[0].Features, ",") != "steps" || len(jobs[2].Features) != 0 {
		t.Fatalf("jobs %+v", jobs)
	}
}

// TestCheckLocatesEachProblem: a file that does not parse gets every
// problem on stderr with its line and column, as plain text (a key may
// hold escape sequences), and exit status 1.
func TestCheckLocatesEachProblem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ci.yml")
	src := "jobs:\n  a:\n    steps:\n      - uses: actions/setup-go@v5\n  \"b\\e[31m\":\n    needs: nope\n    steps: [{run: x}]\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	msg, err := cliCapture(t, &os.Stderr, "check", path)
	var exit exitError
	if !errors.As(err, &exit) || exit != 1 {
		t.Fatalf("exit %v, want status 1; stderr:\n%s", err, msg)
	}
	for _, want := range []string{"ci.yml:4:15: jobs.a.steps[0].uses: uses (actions) is not supported", "ci.yml:5:3: ", "job name", "2 problem(s)"} {
		if !strings.Contains(string(msg), want) {
			t.Errorf("stderr lacks %q:\n%s", want, msg)
		}
	}
	if strings.ContainsRune(string(msg), 0x1b) {
		t.Errorf("stderr holds an escape character: %q", msg)
	}
	// --json: the same problems on stdout as data, exit status 1.
	out, err := cliCapture(t, &os.Stdout, "--json", "check", path)
	var problems []pipeline.Error
	if !errors.As(err, &exit) || exit != 1 || json.Unmarshal(out, &problems) != nil || len(problems) != 2 ||
		problems[0].Line != 4 || problems[0].Column != 15 || problems[0].Path != "jobs.a.steps[0].uses" || problems[0].File != path {
		t.Fatalf("--json: %v, %s", err, out)
	}
}

// TestCheckReadsABoundedFile: a FILE that never ends (a device, a pipe)
// or a link, which the server would not read either, is refused unread.
func TestCheckReadsABoundedFile(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetArgs([]string{"check", "/dev/zero"})
		done <- root.ExecuteContext(context.Background())
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "/dev/zero is not a regular file") || exitStatus(err) != 2 {
			t.Fatalf("check /dev/zero: %v (exit status %d, want 2: not read)", err, exitStatus(err))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("check /dev/zero did not end")
	}
}

// TestCheckShowsNamesAsText: a job's name made of a matrix value holding
// a bidi override, and a link for the pipeline file, as a checkout could
// hold: the table shows the override as U+FFFD, the link is refused.
func TestCheckShowsNamesAsText(t *testing.T) {
	dir := t.TempDir()
	src := "jobs:\n  b:\n    strategy: {matrix: {x: [\"\\u202etxt.exe\"]}}\n    steps: [{run: x}]\n"
	if err := os.WriteFile(filepath.Join(dir, ".forgeci.yml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := cliOutput(t, "check", dir)
	if strings.ContainsRune(out, 0x202e) || !strings.Contains(out, "b (\uFFFDtxt.exe)") {
		t.Errorf("the table shows %q", out)
	}
	linked := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, ".forgeci.yml"), filepath.Join(linked, ".forgeci.yml")); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	root.SetArgs([]string{"check", linked})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("a linked pipeline file: %v", err)
	}
}

// TestCheckWarnsOfAnUntrackedFile: in a git checkout, a pipeline file git
// does not track passes check with a warning (submit would not take it),
// and without one once added.
func TestCheckWarnsOfAnUntrackedFile(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, ".forgeci.yml"), []byte("jobs: {a: {steps: [{run: x}]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	msg, err := cliCapture(t, &os.Stderr, "check", dir)
	if err != nil || !strings.Contains(string(msg), "git does not track") {
		t.Fatalf("untracked: %v, stderr %q", err, msg)
	}
	if out, err := exec.Command("git", "-C", dir, "add", ".forgeci.yml").CombinedOutput(); err != nil {
		t.Fatalf("git add: %v %s", err, out)
	}
	if msg, err = cliCapture(t, &os.Stderr, "check", dir); err != nil || len(msg) != 0 {
		t.Fatalf("tracked: %v, stderr %q", err, msg)
	}
}

// TestCheckReadsStandardInput: "check -" parses standard input, named
// <stdin> in what it prints, and reads no more of it than a pipeline may
// hold.
func TestCheckReadsStandardInput(t *testing.T) {
	withStdin := func(src string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "in")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		saved := os.Stdin
		os.Stdin = f
		t.Cleanup(func() { os.Stdin = saved; f.Close() })
	}
	withStdin("jobs:\n  a:\n    steps: [{run: x}]\n")
	if out := cliOutput(t, "check", "-"); !strings.Contains(out, "<stdin>: ok, 1 job(s)") {
		t.Errorf("check - of a good pipeline printed:\n%s", out)
	}
	withStdin("jobs:\n  a:\n    needs: nope\n    steps: [{run: x}]\n")
	msg, err := cliCapture(t, &os.Stderr, "check", "-")
	var exit exitError
	if !errors.As(err, &exit) || exit != 1 || !strings.Contains(string(msg), "<stdin>:3:") {
		t.Errorf("check - of a bad pipeline: %v\n%s", err, msg)
	}
	withStdin(strings.Repeat("#", pipeline.MaxFileBytes+1))
	root := newRoot()
	root.SetArgs([]string{"check", "-"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "standard input is over the limit") ||
		exitStatus(err) != 2 {
		t.Errorf("check - of too much: %v (exit status %d, want 2)", err, exitStatus(err))
	}
}

// TestCheckExitStatuses: 1 for a file read and found wrong, 2 for one that
// could not be read (none there), so that a CI step can tell them apart.
func TestCheckExitStatuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("jobs: {a: {needs: nope, steps: [{run: x}]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{bad: 1, filepath.Join(dir, "none.yml"): 2, dir: 2} {
		_, err := cliCapture(t, &os.Stderr, "check", path)
		if got := exitStatus(err); got != want {
			t.Errorf("check %s: exit status %d (%v), want %d", path, got, err, want)
		}
	}
}
