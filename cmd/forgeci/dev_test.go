package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/snapshot"
)

// TestDevStack builds the real forgeci binary, starts `forgeci dev` (its own
// PostgreSQL, every handler, the sweeper), registers a runner with the token
// it prints, claims with nothing queued, and stops it with SIGINT.
func TestDevStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "forgeci")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	info := filepath.Join(dir, "info")
	cmd := exec.Command(bin, "dev", "--addr", "127.0.0.1:0", "--info", info, "--sweep-every", "200ms")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	vals := map[string]string{}
	deadline := time.Now().Add(60 * time.Second)
	for len(vals) < 4 {
		if time.Now().After(deadline) {
			t.Fatal("forgeci dev did not write its info file within 60s")
		}
		select {
		case err := <-exited:
			t.Fatalf("forgeci dev exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		f, err := os.Open(info)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				vals[k] = v
			}
		}
		f.Close()
	}
	url := vals["FORGECI_URL"]
	body, _ := json.Marshal(map[string]any{"registration_token": vals["FORGECI_REGISTRATION_TOKEN"], "name": "box", "labels": []string{"linux"}})
	resp, err := http.Post(url+"/v1/runners/register", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct{ Token string }
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if resp.StatusCode != 201 || reg.Token == "" {
		t.Fatalf("register: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", url+"/v1/runner/claim", strings.NewReader(`{"wait_seconds":0}`))
	req.Header.Set("Authorization", "Bearer "+reg.Token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("claim with nothing queued: %d", resp.StatusCode)
	}
	testSubmitImmutable(t, bin, vals, reg.Token)

	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("forgeci dev exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("forgeci dev did not stop on SIGINT")
	}
	if !strings.Contains(stdout.String(), "forgeci-runner register --server "+url) {
		t.Fatalf("dev did not print how to register a runner:\n%s", stdout.String())
	}
}

// testSubmitImmutable submits a git checkout with the real CLI, then edits
// and deletes the checkout; the job still gets the submitted bytes,
// verified by digest and manifest. A broken pipeline is refused with its
// position.
func testSubmitImmutable(t *testing.T, bin string, vals map[string]string, runnerToken string) {
	ctx := context.Background()
	checkout := filepath.Join(t.TempDir(), "app")
	if err := os.MkdirAll(checkout, 0o755); err != nil {
		t.Fatal(err)
	}
	pipelineYAML := "jobs:\n  build:\n    runs-on: linux\n    steps:\n      - run: cat main.txt\n"
	for name, content := range map[string]string{".forgeci.yml": pipelineYAML, "main.txt": "original\n"} {
		if err := os.WriteFile(filepath.Join(checkout, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "one"}} {
		if out, err := exec.Command("git", append([]string{"-C", checkout}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	cliEnv := append(os.Environ(), "FORGECI_URL="+vals["FORGECI_URL"], "FORGECI_TOKEN="+vals["FORGECI_TOKEN"])
	submitCmd := exec.Command(bin, "submit", "--dir", checkout, "--project", "acme/app", "--json")
	submitCmd.Env = cliEnv
	if out, err := submitCmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "project acme/app not found") {
		t.Fatalf("submit to a project that does not exist: %v %s", err, out)
	}
	create := exec.Command(bin, "project", "create", "acme/app")
	create.Env = cliEnv
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("project create: %v %s", err, out)
	}
	submitCmd = exec.Command(bin, "submit", "--dir", checkout, "--project", "acme/app", "--json")
	submitCmd.Env = cliEnv
	out, err := submitCmd.Output()
	if err != nil {
		t.Fatalf("submit: %v %s", err, out)
	}
	var run struct {
		ID   string
		Jobs []struct{ ID, Name, State string }
	}
	if err := json.Unmarshal(out, &run); err != nil || len(run.Jobs) != 1 || run.Jobs[0].State != "QUEUED" {
		t.Fatalf("submit output %s: %v", out, err)
	}
	// Edit, then delete, the checkout: the run must not notice.
	_ = os.WriteFile(filepath.Join(checkout, "main.txt"), []byte("EDITED AFTER SUBMIT\n"), 0o644)
	_ = os.RemoveAll(checkout)

	post := func(path string, body any, out any) int {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", vals["FORGECI_URL"]+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+runnerToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			_ = json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	var claim protocol.Claim
	if s := post("/v1/runner/claim", map[string]any{"wait_seconds": 5}, &claim); s != 200 || claim.Job.ID != run.Jobs[0].ID {
		t.Fatalf("claim: %d %+v", s, claim)
	}
	var src struct {
		URL, BlobDigest, ManifestDigest string
		Size                            int64
	}
	var raw map[string]any
	if s := post("/v1/runner/jobs/"+claim.Job.ID+"/source", map[string]any{"lease": claim.Lease}, &raw); s != 200 {
		t.Fatalf("source: %d %v", s, raw)
	}
	src.URL, src.BlobDigest, src.ManifestDigest = raw["url"].(string), raw["blob_digest"].(string), raw["manifest_digest"].(string)
	src.Size = int64(raw["size"].(float64))
	if src.BlobDigest != claim.Source.BlobDigest {
		t.Fatalf("source digest %s, claim said %s", src.BlobDigest, claim.Source.BlobDigest)
	}
	tmp := t.TempDir()
	blob, err := snapshot.Download(ctx, http.DefaultClient, src.URL, src.BlobDigest, src.Size, tmp)
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(tmp, "ws")
	_ = os.Mkdir(ws, 0o755)
	if _, err := snapshot.ExtractVerified(blob, ws, src.ManifestDigest, snapshot.Limits{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "main.txt")); string(got) != "original\n" {
		t.Fatalf("job sees %q, not the submitted bytes", got)
	}

	// A broken pipeline: refused, every error located, nothing queued.
	bad := t.TempDir()
	_ = os.WriteFile(filepath.Join(bad, ".forgeci.yml"), []byte("jobs:\n  a:\n    stepz: []\n"), 0o644)
	badCmd := exec.Command(bin, "submit", "--dir", bad, "--project", "acme/app")
	badCmd.Env = submitCmd.Env
	msg, err := badCmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), ".forgeci.yml:3:5: jobs.a.stepz: unknown key") {
		t.Fatalf("broken pipeline submit: %v\n%s", err, msg)
	}
}
