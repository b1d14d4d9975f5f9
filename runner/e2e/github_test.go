package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/scm/fakegithub"
)

// TestGitHubPush: the whole GitHub path with real processes. forgeci dev
// runs the scm worker against a fake GitHub; the repository and a secret
// are registered with the CLI; a signed push webhook makes a run of the
// commit's tarball; a real runner executes it with the secret in its
// environment and redacted from its log; both jobs end up as successful
// check runs on the commit.
func TestGitHubPush(t *testing.T) {
	gh := fakegithub.New(t)
	s := startWith(t, "FORGECI_GITHUB_APP_ID=4242", "FORGECI_GITHUB_PRIVATE_KEY="+string(gh.PrivateKeyPEM()),
		"FORGECI_GITHUB_API_URL="+gh.URL(), "FORGECI_PUBLIC_URL=http://ci.local")
	forgeci := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(s.bin, "forgeci"), args...)
		cmd.Env = append(os.Environ(), "FORGECI_DATABASE_URL="+s.vals["FORGECI_DATABASE_URL"],
			"FORGECI_URL="+s.vals["FORGECI_URL"], "FORGECI_TOKEN="+s.vals["FORGECI_TOKEN"])
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("forgeci %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	const secret = "a-webhook-secret-of-some-length"
	secretFile := filepath.Join(s.dir, "webhook.secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	forgeci("", "repo", "add", "--id", "31337", "--name", "octo/app", "--installation", "9", "--project", "app",
		"--create-project", "--secret-file", secretFile)
	gh.AddRepository(31337, "octo/app")
	forgeci("hunter2-deploy-token\n", "secret", "set", "--project", "app", "--name", "DEPLOY_TOKEN")

	repo := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(repo, ".forgeci.yml"), []byte(`jobs:
  build:
    runs-on: linux
    steps:
      - run: ./build.sh
  deploy:
    runs-on: linux
    needs: build
    secrets: [DEPLOY_TOKEN]
    env: {AS_ENV: "${{ secrets.DEPLOY_TOKEN }}"}
    steps:
      - run: 'test -n "$DEPLOY_TOKEN" && echo "token is $DEPLOY_TOKEN and $AS_ENV"'
`), 0o644))
	must(os.WriteFile(filepath.Join(repo, "build.sh"), []byte("#!/bin/sh\necho built from the tarball\n"), 0o755))
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "c1"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git: %v %s", err, out)
		}
	}
	out, _ := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	sha := strings.TrimSpace(string(out))
	gh.AddGitCommit(t, "octo/app", repo, sha)

	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "after": sha, "pusher": map[string]any{"name": "octo"},
		"repository": map[string]any{"id": 31337, "full_name": "octo/app"}})
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, _ := http.NewRequest("POST", s.vals["FORGECI_URL"]+"/v1/webhooks/github", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", "e2e-delivery-1")
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", "31337")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	must(err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("webhook: %d", resp.StatusCode)
	}

	var runID string
	deadline := time.Now().Add(30 * time.Second)
	for runID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no run from the delivery:\n%s", forgeci("", "deliveries"))
		}
		var ds []struct {
			RunID string `json:"run_id"`
		}
		_ = json.Unmarshal([]byte(forgeci("", "deliveries", "--json")), &ds)
		if len(ds) == 1 {
			runID = ds[0].RunID
		}
		time.Sleep(200 * time.Millisecond)
	}
	v := s.waitRun(runID, func(v runView) bool { return v.State == "PASSED" || v.State == "FAILED" }, 60*time.Second)
	if v.State != "PASSED" {
		t.Fatalf("run %s: %+v", runID, v)
	}
	for _, j := range v.Jobs {
		log := s.log(runID, j.ID)
		if strings.Contains(log, "hunter2") {
			t.Fatalf("the secret is in the %s log:\n%s", j.Name, log)
		}
		if j.Name == "deploy" && !strings.Contains(log, "token is *** and ***") {
			t.Fatalf("deploy log:\n%s", log)
		}
		if j.Name == "build" && !strings.Contains(log, "built from the tarball") {
			t.Fatalf("build log:\n%s", log)
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		got := map[string]string{}
		for _, c := range gh.CheckRuns("octo/app") {
			got[c.Name] = c.Status + "/" + c.Conclusion
		}
		if len(got) == 2 && got["build"] == "completed/success" && got["deploy"] == "completed/success" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("check runs: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := len(gh.CheckRuns("octo/app")); n != 2 {
		t.Fatalf("%d check runs, want 2", n)
	}
}
