package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCLI drives the forgeci CLI against the real stack and a real runner:
// login saves the config that later commands use, runs/logs/retry/cancel
// work by run ID and job name, runner tokens and revocation, API tokens
// made, listed and revoked, --json, a helpful error for a bad token, and
// shell completion.
func TestCLI(t *testing.T) {
	s := start(t)
	cfg := filepath.Join(s.dir, "cli.json")
	cli := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(s.bin, "forgeci"), args...)
		cmd.Env = append(os.Environ(), "FORGECI_CONFIG="+cfg, "FORGECI_URL=", "FORGECI_TOKEN=")
		out, err := cmd.CombinedOutput()
		if wantOK && err != nil {
			t.Fatalf("forgeci %v: %v\n%s", args, err, out)
		}
		if !wantOK && err == nil {
			t.Fatalf("forgeci %v succeeded:\n%s", args, out)
		}
		return string(out)
	}
	if out := cli(false, "runs"); !strings.Contains(out, "forgeci login") {
		t.Fatalf("no config: %s", out)
	}
	if out := cli(false, "login", "--url", s.vals["FORGECI_URL"], "--token", "fru_nope"); !strings.Contains(out, "not accepted") {
		t.Fatalf("bad token: %s", out)
	}
	if out := cli(true, "login", "--url", s.vals["FORGECI_URL"], "--token", s.vals["FORGECI_TOKEN"]); !strings.Contains(out, "as admin (admin)") {
		t.Fatalf("login: %s", out)
	}
	if fi, err := os.Stat(cfg); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v", fi, err)
	}

	dir := writePipeline(t, `jobs:
  hello:
    runs-on: linux
    steps:
      - run: echo "hello from the cli test"
  after:
    runs-on: linux
    needs: hello
    steps:
      - run: echo "second job"
`)
	cmd := exec.Command(filepath.Join(s.bin, "forgeci"), "submit", "--dir", dir, "--project", "cli", "--follow")
	cmd.Env = append(os.Environ(), "FORGECI_CONFIG="+cfg)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello from the cli test") || !strings.Contains(string(out), "PASSED") {
		t.Fatalf("submit --follow: %v\n%s", err, out)
	}
	var runs []struct{ ID, State, Project string }
	if err := json.Unmarshal([]byte(cli(true, "runs", "--json", "--project", "cli")), &runs); err != nil || len(runs) != 1 || runs[0].State != "PASSED" {
		t.Fatalf("runs --json: %v %+v", err, runs)
	}
	runID := runs[0].ID
	if out := cli(true, "runs", runID); !strings.Contains(out, "hello") || !strings.Contains(out, "after") {
		t.Fatalf("runs ID: %s", out)
	}
	if out := cli(true, "logs", runID, "hello"); !strings.Contains(out, "hello from the cli test") || strings.Contains(out, "second job") {
		t.Fatalf("logs: %s", out)
	}
	if out := cli(true, "logs", "-f", runID, "after"); !strings.Contains(out, "second job") {
		t.Fatalf("logs -f: %s", out)
	}
	// --timestamps: every line begins with the time its runner saw it.
	stamped := strings.TrimSuffix(cli(true, "logs", "--timestamps", runID, "hello"), "\n")
	stampRE := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `)
	for _, line := range strings.Split(stamped, "\n") {
		if !stampRE.MatchString(line) {
			t.Fatalf("logs --timestamps: a line without its time: %q in\n%s", line, stamped)
		}
	}
	if !strings.Contains(stamped, "Z hello from the cli test") {
		t.Fatalf("logs --timestamps:\n%s", stamped)
	}
	if out := cli(false, "logs", runID, "nosuch"); !strings.Contains(out, "its jobs: hello, after") {
		t.Fatalf("unknown job: %s", out)
	}
	// A job that needs another is retried with the whole run, not alone.
	if out := cli(false, "retry", runID, "after"); !strings.Contains(out, "retry the whole run instead") {
		t.Fatalf("retry of a job with needs: %s", out)
	}
	out2 := cli(true, "retry", runID, "hello", "--json")
	var retried struct{ ID, Trigger string }
	if err := json.Unmarshal([]byte(out2), &retried); err != nil || retried.ID == runID || !strings.Contains(retried.Trigger, "retry of #1 hello") {
		t.Fatalf("retry: %v %s", err, out2)
	}
	s.waitRun(retried.ID, func(v runView) bool { return v.State == "PASSED" }, 60e9)

	// A slow run, canceled from the CLI.
	slow := writePipeline(t, "jobs:\n  slow:\n    runs-on: linux\n    steps:\n      - run: sleep 60\n")
	cmd = exec.Command(filepath.Join(s.bin, "forgeci"), "submit", "--dir", slow, "--project", "cli", "--json")
	cmd.Env = append(os.Environ(), "FORGECI_CONFIG="+cfg)
	b, err := cmd.Output()
	var slowRun struct{ ID string }
	if err != nil || json.Unmarshal(b, &slowRun) != nil {
		t.Fatalf("submit slow: %v %s", err, b)
	}
	s.waitRun(slowRun.ID, func(v runView) bool { return v.State == "RUNNING" }, 60e9)
	if out := cli(true, "cancel", slowRun.ID); !strings.Contains(out, "asked 1 running job(s) to stop") {
		t.Fatalf("cancel: %s", out)
	}
	s.waitRun(slowRun.ID, func(v runView) bool { return v.State == "CANCELED" }, 60e9)

	cliRunners(t, s, cli)
	cliTokens(t, cli)
	if out := cli(true, "completion", "bash"); !strings.Contains(out, "__start_forgeci") {
		t.Fatalf("completion: %.200s", out)
	}
}

// cliRunners: a registration token made with the CLI registers a runner,
// which the CLI lists and revokes; registration tokens are listed with the
// runner each registered, and an unused one is revoked.
func cliRunners(t *testing.T, s *stack, cli func(wantOK bool, args ...string) string) {
	t.Helper()
	tokOut := cli(true, "runner", "token", "create", "--ttl", "10m", "--json")
	var tok struct {
		Token string `json:"registration_token"`
	}
	if err := json.Unmarshal([]byte(tokOut), &tok); err != nil || !strings.HasPrefix(tok.Token, "frg_") {
		t.Fatalf("runner token create: %v %s", err, tokOut)
	}
	tokenFile := filepath.Join(s.dir, "second.token")
	if out, err := exec.Command(filepath.Join(s.bin, "forgeci-runner"), "register", "--server", s.vals["FORGECI_URL"],
		"--registration-token", tok.Token, "--name", "second", "--labels", "linux", "--token-file", tokenFile).CombinedOutput(); err != nil {
		t.Fatalf("register with the CLI's token: %v %s", err, out)
	}
	var rs []struct{ ID, Name string }
	_ = json.Unmarshal([]byte(cli(true, "runner", "list", "--json")), &rs)
	var secondID string
	for _, r := range rs {
		if r.Name == "second" {
			secondID = r.ID
		}
	}
	if secondID == "" {
		t.Fatalf("runner list: %+v", rs)
	}
	cli(true, "runner", "revoke", secondID)
	if out := cli(true, "runner", "list"); !strings.Contains(out, "revoked") {
		t.Fatalf("runner list after revoke: %s", out)
	}
	// Started, the revoked runner is refused at its first poll: it stops
	// and says why, with the status its units do not restart (polling on,
	// each poll would be a lookup in the database).
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(s.bin, "forgeci-runner"), "run", "--server", s.vals["FORGECI_URL"],
		"--token-file", tokenFile, "--work-dir", filepath.Join(s.workDir(), "revoked"), "--concurrency", "2",
		"--kill-grace", "1s").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(string(out), "register the runner again") {
		t.Fatalf("the revoked runner, run: %v\n%s", err, out)
	}
	// Registration tokens: listed with the runner each registered; an
	// unused one revoked registers nothing.
	if out := cli(true, "runner", "token", "list"); !strings.Contains(out, "used by runner "+secondID) {
		t.Fatalf("runner token list: %s", out)
	}
	cli(true, "runner", "token", "create", "--description", "leaked")
	var regs []struct{ ID, Description string }
	_ = json.Unmarshal([]byte(cli(true, "runner", "token", "list", "--json")), &regs)
	if len(regs) == 0 || regs[0].Description != "leaked" {
		t.Fatalf("runner token list --json: %+v", regs)
	}
	if out := cli(true, "runner", "token", "revoke", regs[0].ID); !strings.Contains(out, "revoked") {
		t.Fatalf("runner token revoke: %s", out)
	}
}

// cliTokens: an API token for a bot, made, listed as used, revoked, and
// refused.
func cliTokens(t *testing.T, cli func(wantOK bool, args ...string) string) {
	t.Helper()
	var bot struct{ ID, Token string }
	if err := json.Unmarshal([]byte(cli(true, "token", "create", "--description", "ci-bot", "--json")), &bot); err != nil || !strings.HasPrefix(bot.Token, "fru_") {
		t.Fatalf("token create: %v %+v", err, bot)
	}
	// Its row says it was used: by this very request (CREATED, then LAST USED).
	if out := cli(true, "--token", bot.Token, "token", "list"); !regexp.MustCompile(`ci-bot\s+\S+ \S+\s+\d{4}-\d\d-\d\d \d\d:\d\d\s.*active`).MatchString(out) ||
		strings.Contains(out, bot.Token) {
		t.Fatalf("token list with the new token: %s", out)
	}
	if out := cli(true, "token", "revoke", bot.ID); !strings.Contains(out, "revoked") || strings.Contains(out, "made with it") {
		t.Fatalf("token revoke: %s", out)
	}
	if out := cli(false, "--token", bot.Token, "runs"); !strings.Contains(out, "revoked") {
		t.Fatalf("a revoked token: %s", out)
	}
	if out := cli(true, "token", "list"); !regexp.MustCompile(`ci-bot\s.*revoked`).MatchString(out) {
		t.Fatalf("token list after revoke: %s", out)
	}
}
