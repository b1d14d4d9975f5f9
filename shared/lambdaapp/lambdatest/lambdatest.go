// Package lambdatest runs ForgeCI's real Lambda bootstraps the way Lambda
// does, without AWS: it builds functions/<name> as static bootstrap
// binaries, runs each under the AWS Lambda Runtime Interface Emulator
// (aws-lambda-rie), invokes it with events, and stands in for Secrets
// Manager. The smoke tests and cmd/forgeci-lambdabench use it.
package lambdatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/localnet"
)

// RIE finds aws-lambda-rie: $FORGECI_LAMBDA_RIE, then PATH, then $GOPATH/bin.
func RIE() (string, error) {
	return localnet.GoTool("FORGECI_LAMBDA_RIE", "aws-lambda-rie", "run make deps")
}

// ModuleRoot returns the directory of go.mod, from the working directory up.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Build compiles the packages (import paths relative to the module root,
// such as ./functions/claim) into out/<last element>/bootstrap, with the
// flags of the Makefile's lambda macro (static, -tags lambda.norpc,
// -trimpath, stripped) for linux/goarch (runtime.GOARCH to run them here).
// One go build for all of them, so they compile in parallel.
func Build(ctx context.Context, out, goarch string, pkgs ...string) (map[string]string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(out, ".build")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", bin + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, msg)
	}
	paths := map[string]string{}
	for _, p := range pkgs {
		name := filepath.Base(p)
		dir := filepath.Join(out, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "bootstrap")
		if err := os.Rename(filepath.Join(bin, name), path); err != nil {
			return nil, err
		}
		paths[name] = path
	}
	return paths, os.Remove(bin)
}

// Emulator is one bootstrap running under aws-lambda-rie: one execution
// environment, like one Lambda container. The emulator fails under
// concurrent invokes, so Invoke serialises them.
type Emulator struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  *syncBuffer
}

// Start runs bootstrap under the emulator with exactly env (plus PATH), on
// free loopback ports. The function's init runs at the first Invoke, as in
// Lambda. Call Stop when done.
func Start(ctx context.Context, rie, bootstrap string, env []string) (*Emulator, error) {
	for attempt := 1; ; attempt++ {
		e, err := startOnce(ctx, rie, bootstrap, env)
		// A free port can be taken by another process between being chosen
		// and the emulator binding it: choose again.
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return e, err
		}
	}
}

func startOnce(ctx context.Context, rie, bootstrap string, env []string) (*Emulator, error) {
	apiPort, err := localnet.FreePort()
	if err != nil {
		return nil, err
	}
	runtimePort, err := localnet.FreePort()
	if err != nil {
		return nil, err
	}
	e := &Emulator{url: fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", apiPort),
		done: make(chan struct{}), log: &syncBuffer{}}
	e.cmd = exec.Command(rie,
		"--runtime-interface-emulator-address", "127.0.0.1:"+strconv.Itoa(apiPort),
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(runtimePort),
		"--log-level", "error", bootstrap)
	e.cmd.Dir = filepath.Dir(bootstrap)
	e.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "AWS_LAMBDA_FUNCTION_TIMEOUT=60"}, env...)
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", rie, err)
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", apiPort), time.Second)
		if err == nil {
			c.Close()
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("aws-lambda-rie exited at start:\n%s", e.log.String())
		case <-ctx.Done():
			e.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("aws-lambda-rie did not listen within 10s:\n%s", e.log.String())
		}
	}
}

// Invoke sends one event and returns the function's response payload and
// how long the round trip took. A function error (the runtime's
// {"errorMessage", "errorType"} answer) is returned as an error.
func (e *Emulator) Invoke(ctx context.Context, event any) (json.RawMessage, time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	body, err := json.Marshal(event)
	if err != nil {
		return nil, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("invoke: %w\n%s", err, e.log.String())
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return nil, took, err
	}
	if resp.StatusCode != http.StatusOK {
		return out, took, fmt.Errorf("invoke: emulator answered %d %s\n%s", resp.StatusCode, out, e.log.String())
	}
	var fnErr struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	if json.Unmarshal(out, &fnErr) == nil && fnErr.ErrorType != "" {
		return out, took, fmt.Errorf("function error %s: %s\n%s", fnErr.ErrorType, fnErr.ErrorMessage, e.log.String())
	}
	return out, took, nil
}

// Log returns what the emulator and the function wrote so far.
func (e *Emulator) Log() string { return e.log.String() }

// Stop ends the emulator and the bootstrap it runs.
func (e *Emulator) Stop() {
	if e.cmd.Process != nil {
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-e.done
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// SecretsManager is a stand-in for AWS Secrets Manager's GetSecretValue
// (JSON 1.1 protocol), so bootstraps read their secrets through the real
// SDK path: point AWS_ENDPOINT_URL_SECRETS_MANAGER at URL.
type SecretsManager struct {
	URL     string
	srv     *httptest.Server
	mu      sync.Mutex
	secrets map[string]string
	reads   map[string]int
}

// NewSecretsManager serves secrets (ARN → SecretString). Close it when done.
func NewSecretsManager(secrets map[string]string) *SecretsManager {
	sm := &SecretsManager{secrets: secrets, reads: map[string]int{}}
	sm.srv = httptest.NewServer(http.HandlerFunc(sm.serve))
	sm.URL = sm.srv.URL
	return sm
}

func (sm *SecretsManager) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	var in struct{ SecretId string }
	if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" || json.NewDecoder(r.Body).Decode(&in) != nil ||
		!strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"InvalidRequestException","message":"only signed GetSecretValue is served"}`)
		return
	}
	sm.mu.Lock()
	v, ok := sm.secrets[in.SecretId]
	if ok {
		sm.reads[in.SecretId]++
	}
	sm.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}`)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"ARN": in.SecretId, "Name": in.SecretId, "SecretString": v,
		"VersionId": "v1", "CreatedDate": 1.7e9})
}

// Reads returns how many times the secret was read.
func (sm *SecretsManager) Reads(arn string) int {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.reads[arn]
}

// Close stops the server.
func (sm *SecretsManager) Close() { sm.srv.Close() }

// Stand-in secret ARNs of the template's three secrets, and the GitHub App
// webhook secret AWSEnv puts in the second.
const (
	DatabaseSecretARN   = "arn:aws:secretsmanager:us-east-1:123456789012:secret:forgeci-db-AbCdEf"
	WebhookSecretARN    = "arn:aws:secretsmanager:us-east-1:123456789012:secret:forgeci-webhook-AbCdEf"
	GitHubPrivateKeyARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:forgeci-github-key-AbCdEf"
	WebhookSecret       = "stand-in-webhook-secret"
)

// AWSEnv is the environment template.yaml gives a function, with a GitHub
// App configured (ID 12345, a fresh private key, an API URL nothing listens
// on), pointed at the PostgreSQL of dbURL, the bucket of blobs and a
// stand-in Secrets Manager, which it returns already holding the three
// secrets: the functions assemble their database URL from FORGECI_DATABASE_*
// and the credentials secret, and read the GitHub secrets, as in AWS.
func AWSEnv(dbURL string, blobs cas.Config) ([]string, *SecretsManager, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, nil, err
	}
	pw, _ := u.User.Password()
	creds, _ := json.Marshal(map[string]string{"username": u.User.Username(), "password": pw,
		"engine": "postgres", "host": "the-database-itself.example"})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	sm := NewSecretsManager(map[string]string{DatabaseSecretARN: string(creds),
		WebhookSecretARN: WebhookSecret, GitHubPrivateKeyARN: string(pemKey)})
	region := blobs.Region
	if region == "" {
		region = "us-east-1"
	}
	return []string{
		"AWS_REGION=" + region, "AWS_ACCESS_KEY_ID=AKIDLAMBDATEST", "AWS_SECRET_ACCESS_KEY=lambdatest",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + sm.URL,
		"FORGECI_DATABASE_HOST=" + u.Hostname(), "FORGECI_DATABASE_PORT=" + u.Port(),
		"FORGECI_DATABASE_NAME=" + strings.TrimPrefix(u.Path, "/"), "FORGECI_DATABASE_SSLMODE=disable",
		"FORGECI_DATABASE_CREDENTIALS_SECRET_ARN=" + DatabaseSecretARN,
		"FORGECI_BUCKET=" + blobs.Bucket, "FORGECI_S3_ENDPOINT=" + blobs.Endpoint,
		"FORGECI_S3_ACCESS_KEY=" + blobs.AccessKey, "FORGECI_S3_SECRET_KEY=" + blobs.SecretKey,
		"FORGECI_GITHUB_WEBHOOK_SECRET_SECRET_ARN=" + WebhookSecretARN,
		"FORGECI_GITHUB_PRIVATE_KEY_SECRET_ARN=" + GitHubPrivateKeyARN,
		"FORGECI_GITHUB_APP_ID=12345", "FORGECI_GITHUB_API_URL=http://127.0.0.1:1/", "FORGECI_PUBLIC_URL=https://ci.example",
		"FORGECI_SCM_FUNCTION=forgeci-scm",
	}, sm, nil
}

// Scheduled is the event EventBridge's schedule sends a function.
func Scheduled(id string) events.EventBridgeEvent {
	return events.EventBridgeEvent{Version: "0", ID: id, DetailType: "Scheduled Event", Source: "aws.events",
		AccountID: "123456789012", Time: time.Now(), Region: "us-east-1", Detail: json.RawMessage("{}")}
}

// HTTPRequest is the API Gateway HTTP API (payload v2) event of route
// ("POST /v1/runner/jobs/{job_id}/logs") for path, the route with its
// parameters filled in and any query after "?".
func HTTPRequest(id, route, path string, headers map[string]string, body string) events.APIGatewayV2HTTPRequest {
	method, _, _ := strings.Cut(route, " ")
	p, query, _ := strings.Cut(path, "?")
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: route, RawPath: p, RawQueryString: query, Headers: headers, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			AccountID: "123456789012", APIID: "lambdatest", Stage: "$default", DomainName: "lambdatest.execute-api.us-east-1.amazonaws.com",
			RequestID: id, TimeEpoch: time.Now().UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: p, Protocol: "HTTP/1.1",
				SourceIP: "203.0.113.7", UserAgent: headers["user-agent"]},
		},
	}
}
