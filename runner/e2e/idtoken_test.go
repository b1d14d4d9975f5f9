package e2e

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

	"github.com/coreos/go-oidc/v3/oidc"
)

// idTokenPipeline: deploy may ask for identity tokens and does, through
// the runner's helper, its --json form and curl on the socket; plain may
// not, and finds no socket (the helper, which the test puts where the
// step can run it, says so).
const idTokenPipeline = `jobs:
  deploy:
    runs-on: linux
    permissions: {id-token: write}
    steps:
      - run: |
          test -S "$FORGECI_ID_TOKEN_SOCKET" && test -x "$FORGECI_RUNNER_BIN"
          "$FORGECI_RUNNER_BIN" id-token --audience test-aud > token.txt
          echo "printed: $(cat token.txt)"
          "$FORGECI_RUNNER_BIN" id-token --audience test-aud --json > answer.json
          curl -sS --unix-socket "$FORGECI_ID_TOKEN_SOCKET" "http://localhost/token?audience=curl-aud" > curl.json
          if "$FORGECI_RUNNER_BIN" id-token --audience "has space"; then exit 1; fi
    artifacts: [{name: token, paths: [token.txt, answer.json, curl.json]}]
  plain:
    runs-on: linux
    steps:
      - run: |
          test -z "$FORGECI_ID_TOKEN_SOCKET" && test -z "$FORGECI_RUNNER_BIN" && echo "plain: no socket here"
          if RUNNER_COPY id-token --audience test-aud; then exit 1; fi
`

// testIDTokens: a job with permissions: {id-token: write} gets tokens
// from the runner's per-job socket that go-oidc verifies against the
// stack's discovery document, bound to the job's lease (introspection
// says inactive once the job has ended); a job without the permission
// has no socket.
func testIDTokens(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		ch := s.channel(t)
		runner := filepath.Join(ch, "forgeci-runner")
		b, err := os.ReadFile(filepath.Join(s.bin, "forgeci-runner"))
		if err != nil || os.WriteFile(runner, b, 0o755) != nil {
			t.Fatalf("copy the runner where steps can run it: %v", err)
		}
		yml := strings.ReplaceAll(idTokenPipeline, "RUNNER_COPY", runner)
		id, err := s.submit(gitPipeline(t, yml, "main"), false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "PASSED" || v.State == "FAILED" }, 90*time.Second)
		deployLog, plainLog := s.log(id, jobNamed(v, "deploy")), s.log(id, jobNamed(v, "plain"))
		if v.State != "PASSED" {
			t.Fatalf("run %+v\ndeploy:\n%s\nplain:\n%s", v, deployLog, plainLog)
		}
		if !strings.Contains(deployLog, "only visible ASCII characters") {
			t.Fatalf("a bad audience was not refused by the socket:\n%s", deployLog)
		}
		if !strings.Contains(plainLog, "plain: no socket here") || !strings.Contains(plainLog, "FORGECI_ID_TOKEN_SOCKET is not set") {
			t.Fatalf("plain job:\n%s", plainLog)
		}
		dir := t.TempDir()
		if out, err := s.cli("artifacts", id, "deploy", "-o", dir); err != nil {
			t.Fatalf("download: %v\n%s", err, out)
		}
		read := func(name string) string {
			b, err := os.ReadFile(filepath.Join(dir, "deploy", "token", name))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(b))
		}
		var answer, curled struct {
			Token     string    `json:"token"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal([]byte(read("answer.json")), &answer); err != nil || answer.Token == "" || answer.ExpiresAt.IsZero() {
			t.Fatalf("--json answer %q: %v", read("answer.json"), err)
		}
		if err := json.Unmarshal([]byte(read("curl.json")), &curled); err != nil || curled.Token == "" {
			t.Fatalf("curl answer %q: %v", read("curl.json"), err)
		}
		token := read("token.txt")
		// A token a step prints is masked in the log, as a secret is: its
		// signature, without which it is worth nothing.
		parts := strings.Split(token, ".")
		if strings.Contains(deployLog, token) || strings.Contains(deployLog, parts[2]) ||
			!strings.Contains(deployLog, "printed: "+parts[0]+"."+parts[1]+".***") {
			t.Fatalf("the printed token is not masked in the log:\n%s", deployLog)
		}
		s.checkIDToken(t, token, "test-aud", answer.ExpiresAt, jobNamed(v, "deploy"), id)
		s.checkIDToken(t, curled.Token, "curl-aud", curled.ExpiresAt, jobNamed(v, "deploy"), id)
		body, _ := json.Marshal(map[string]string{"token": token})
		resp, err := http.Post(s.vals["FORGECI_URL"]+"/v1/leases/introspect", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var intro map[string]any
		if err := json.Unmarshal(raw, &intro); err != nil || resp.StatusCode != 200 || len(intro) != 1 || intro["active"] != false {
			t.Fatalf("introspection once the job has ended: %d %s", resp.StatusCode, raw)
		}
	}
}

// checkIDToken verifies token with go-oidc against the stack's discovery
// document, at a time inside its short life (exp is the lease's expiry),
// and checks its claims name the deploy job of run runID.
func (s *stack) checkIDToken(t *testing.T, token, audience string, expires time.Time, jobID, runID string) {
	t.Helper()
	ctx := context.Background()
	provider, err := oidc.NewProvider(ctx, s.vals["FORGECI_URL"])
	if err != nil {
		t.Fatal(err)
	}
	at := func() time.Time { return expires.Add(-500 * time.Millisecond) }
	idt, err := provider.Verifier(&oidc.Config{ClientID: audience, Now: at}).Verify(ctx, token)
	if err != nil {
		t.Fatalf("verify %s: %v", token, err)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"job_id", "run_id", "generation", "lease_id", "project", "ref"} {
		if v, ok := claims[name]; !ok || v == "" || v == nil {
			t.Errorf("claim %s missing: %v", name, claims)
		}
	}
	if claims["job_id"] != jobID || claims["run_id"] != runID || claims["ref"] != "refs/heads/main" || claims["generation"] != 1.0 {
		t.Errorf("claims %v: want job %s of run %s on refs/heads/main", claims, jobID, runID)
	}
	if !strings.HasPrefix(idt.Subject, "project:") {
		t.Errorf("sub %q", idt.Subject)
	}
}
