package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/snapshot/snapshottest"
)

// hostileServer is an API whose run R has job J (named job) with artifact
// art, a one-file snapshot, and job J2 named and failed with reason.
func hostileServer(t *testing.T, job, art, name, reason string) *httptest.Server {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte("artifact bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	blob, res := snapshottest.Of(t, src)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/runs/R/artifacts":
			_ = json.NewEncoder(w).Encode(map[string]any{"artifacts": []map[string]any{
				{"job_id": "J", "job": job, "name": art, "digest": res.BlobDigest, "size": res.Size}}})
		case "/v1/runs/R/jobs/J/artifacts/" + art:
			_ = json.NewEncoder(w).Encode(map[string]any{"url": srv.URL + "/blob", "digest": res.BlobDigest, "size": res.Size})
		case "/blob":
			_, _ = w.Write(blob)
		case "/v1/runs/R":
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "R", "project": "p", "number": 1, "state": "FAILED",
				"inputs": map[string]any{"target": "prod\n\x1b[1Aok && curl x > y\u202e"}, "jobs": []map[string]any{{"id": "J2", "name": name, "state": "FAILED", "generation": 1, "reason": reason}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// withStdin runs fn with input as os.Stdin.
func withStdin(t *testing.T, input string, fn func() error) error {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.WriteString(input)
	w.Close()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old }()
	return fn()
}

// cliOutput runs the CLI with args and returns what it printed on stdout.
func cliOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cliCapture(t, &os.Stdout, args...)
	if err != nil {
		t.Fatalf("forgeci %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// cliCapture runs the CLI with args and returns what it printed on
// stream (&os.Stdout or &os.Stderr) and its error.
func cliCapture(t *testing.T, stream **os.File, args ...string) ([]byte, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := *stream
	*stream = w
	root := newRoot()
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	w.Close()
	*stream = saved
	out, _ := io.ReadAll(r)
	return out, err
}

// TestArtifactsStayInTheirDirectory: `forgeci artifacts -o DIR` unpacks
// each artifact into DIR/<job>/<name> with each of those one path element
// whatever the server says: a job's name is the pipeline's text, and one
// of "../../x" (or a hostile server's) wrote outside DIR.
func TestArtifactsStayInTheirDirectory(t *testing.T) {
	for _, c := range []struct{ job, art, wantJob string }{
		{"build (linux/amd64)", "dist", "build (linux_amd64)-"},
		{"../../../../../../../../tmp/forgeci-escape/x", "dist", ".._.._.._.._.._.._.._.._tmp_forgeci-escape_x-"},
		{"..", "dist", "_..-"},
		{"plain", "dist", "plain"},
	} {
		top := t.TempDir()
		out := filepath.Join(top, "out")
		srv := hostileServer(t, c.job, c.art, "j", "")
		cliOutput(t, "--url", srv.URL, "--token", "x", "artifacts", "R", "-o", out)
		var files []string
		err := filepath.Walk(top, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				rel, _ := filepath.Rel(out, p)
				files = append(files, rel)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 1 || !strings.HasPrefix(files[0], c.wantJob) || strings.HasPrefix(files[0], ".."+string(filepath.Separator)) ||
			strings.Count(files[0], string(filepath.Separator)) != 2 || !strings.HasSuffix(files[0], "/dist/hello.txt") {
			t.Errorf("job %q: files %q, want one at %s*/dist/hello.txt", c.job, files, c.wantJob)
		}
	}
}

// TestServerTextIsPrintedPlain: a job's name and reason printed by the CLI
// carry no control character a terminal acts on (escape sequences that
// retitle the window, move the cursor over a FAILED row, write the
// clipboard) and no tab or newline that forges a column or a row.
func TestServerTextIsPrintedPlain(t *testing.T) {
	name := "b (\x1b]0;PWNED\a\x1b[2K\x1b[1AFAKE\tPASSED\nx \u009b2J)"
	srv := hostileServer(t, "j", "dist", name, "fail-fast: "+name+" failed")
	out := cliOutput(t, "--url", srv.URL, "--token", "x", "runs", "R")
	if strings.ContainsAny(out, "\x1b\a\r\u009b") {
		t.Errorf("control characters reached stdout: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 6 || !strings.Contains(lines[5], "b (^[]0;PWNED^G^[[2K^[[1AFAKE^IPASSED^Jx \uFFFD2J)") {
		t.Errorf("want the run's three lines, its input, the table's header and one row, the name in caret notation; got %q", lines)
	}
	// A manual run's input quoted: its newline, escape and bidi override
	// are seen, its shell characters as they are.
	if want := `input target = "prod\n\x1b[1Aok && curl x > y\u202e"`; len(lines) < 4 || lines[3] != want {
		t.Errorf("want the input line %q; got %q", want, lines)
	}
	for _, args := range [][]string{{"artifacts", "R"}} {
		if out := cliOutput(t, append([]string{"--url", srv.URL, "--token", "x"}, args...)...); strings.ContainsAny(out, "\x1b\a") {
			t.Errorf("forgeci %v: control characters reached stdout: %q", args, out)
		}
	}
}

// TestDeployApprovePrintsWhatItApproved: `forgeci deploy approve` says
// what the decision was on, as the dashboard's form shows it: the commit,
// the ref, the trigger, a manual run's inputs quoted.
func TestDeployApprovePrintsWhatItApproved(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/runs/R":
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "R", "project": "p", "number": 7, "state": "RUNNING",
				"git_sha": "abc123", "git_ref": "refs/heads/main", "trigger": "dispatch:ann",
				"inputs": map[string]any{"target": "prod\u202e"}, "jobs": []map[string]any{{"id": "J", "name": "deploy"}}})
		case "/v1/runs/R/jobs/J/deployment/approve":
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "J", "name": "deploy", "state": "QUEUED"})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	out := cliOutput(t, "--url", srv.URL, "--token", "x", "deploy", "approve", "R", "deploy")
	for _, want := range []string{"job deploy: QUEUED", "run p #7: commit abc123 of refs/heads/main, started by dispatch:ann",
		`input target = "prod\u202e"`} {
		if !strings.Contains(out, want) {
			t.Errorf("approve's output lacks %q:\n%s", want, out)
		}
	}
}
