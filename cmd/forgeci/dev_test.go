package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	for len(vals) < 3 {
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
