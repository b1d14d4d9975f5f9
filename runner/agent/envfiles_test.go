package agent

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

func envJob() *job {
	return &job{claim: &protocol.Claim{Secrets: map[string]string{"DEPLOY_KEY": "k"},
		Job: domain.ClaimedJob{Name: "j", JobSpec: domain.JobSpec{Env: map[string]string{"A": "pipeline", "B": "pipeline"}}}},
		idTokenEnv: map[string]string{"FORGECI_ID_TOKEN_SOCKET": "/s"}, ws: "/w"}
}

// TestStepEnvOrder: what steps set replaces the pipeline's env, a step's
// own env replaces both, a later step's value an earlier one's, and the
// directories added go first in PATH, the newest first; the secrets and
// the runner's own variables are still theirs.
func TestStepEnvOrder(t *testing.T) {
	j := envJob()
	if err := j.setEnv([]byte("A=first\nM<<EOF\nline one\nline two\nEOF\n")); err != nil {
		t.Fatal(err)
	}
	if err := j.setEnv([]byte("A=second\n")); err != nil {
		t.Fatal(err)
	}
	if err := j.addPath([]byte("/opt/one\n/opt/two\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := j.addPath([]byte("/opt/three\n")); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range j.env(domain.Step{Env: map[string]string{"B": "step"}}) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{"A": "second", "B": "step", "M": "line one\nline two", "DEPLOY_KEY": "k", "FORGECI_ID_TOKEN_SOCKET": "/s"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if !strings.HasPrefix(env["PATH"], "/opt/three:/opt/two:/opt/one:") || len(env["PATH"]) <= len("/opt/three:/opt/two:/opt/one:") {
		t.Errorf("PATH = %q", env["PATH"])
	}
	if got := j.jobEnv(); got["A"] != "second" || got["B"] != "pipeline" || j.claim.Job.Env["A"] != "pipeline" {
		t.Errorf("the env context %v; the pipeline's %v", got, j.claim.Job.Env)
	}
}

// TestStepEnvRefusals: a file that does not parse, names a step's file,
// a secret or the runner's variable, or passes a bound, is an error and
// changes nothing.
func TestStepEnvRefusals(t *testing.T) {
	for in, want := range map[string]string{
		"no equals\n":                     "not NAME=value",
		"1BAD=x\n":                        "not NAME=value",
		"OK=1\nGITHUB_ENV=/tmp/x\n":       "GITHUB_ENV names a file of each step",
		"FORGECI_OUTPUT=/tmp/x\n":         "FORGECI_OUTPUT names a file",
		"DEPLOY_KEY=mine\n":               "DEPLOY_KEY is set by the runner",
		"FORGECI_ID_TOKEN_SOCKET=/evil\n": "is set by the runner",
		"X<<EOF\nnever closed\n":          "not closed",
		"NUL=a\x00b\n":                    "NUL",
		"BIG=" + strings.Repeat("x", MaxEnvEntryBytes) + "\n": "over 131071",
	} {
		j := envJob()
		if err := j.setEnv([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", in, err, want)
		}
		if len(j.stepEnv) != 0 {
			t.Errorf("%.40q: kept %v", in, j.stepEnv)
		}
	}
	j := envJob()
	for i := 0; i < 3; i++ {
		if err := j.setEnv([]byte(fmt.Sprintf("V%d=%s\n", i, strings.Repeat("x", 80<<10)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.setEnv([]byte("V3=" + strings.Repeat("x", 80<<10) + "\n")); err == nil || !strings.Contains(err.Error(), "over 262144") {
		t.Fatalf("past MaxEnvBytes: %v", err)
	}
	if _, ok := j.stepEnv["V3"]; ok || len(j.stepEnv) != 3 {
		t.Fatalf("kept %d variables", len(j.stepEnv))
	}

	for in, want := range map[string]string{
		"/a:/b\n":  "a colon",
		"/a\x00\n": "NUL",
		"/" + strings.Repeat("d", MaxPathDirBytes): "over 4096",
		strings.Repeat("/d\n", MaxPathDirs+1):      "over 100",
	} {
		j := envJob()
		if err := j.addPath([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("path %.40q: %v, want %q", in, err, want)
		}
		if len(j.stepPath) != 0 {
			t.Errorf("path %.40q: kept %v", in, j.stepPath)
		}
	}
}

// FuzzStepEnvFiles: any environment or path file is kept or refused,
// without panicking, within a second and 32 MB for 64 KiB, and what is
// kept stays within the bounds.
func FuzzStepEnvFiles(f *testing.F) {
	f.Add([]byte("A=b\nC<<X\nd\nX\n"))
	f.Add([]byte("/usr/local/go/bin\n\n/opt/x\r\n"))
	f.Add([]byte("x<<EOF\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		j := envJob()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		envErr, pathErr := j.setEnv(data), j.addPath(data)
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; d > time.Second || alloc > 32<<20 {
			t.Fatalf("%d bytes: %v and %d MB", len(data), d, alloc>>20)
		}
		if envErr == nil {
			for k, v := range j.stepEnv {
				if !envNameRE.MatchString(k) || strings.ContainsRune(v, 0) || j.claim.Secrets[k] != "" {
					t.Fatalf("kept %q=%q", k, v)
				}
			}
			if envBytes(j.stepEnv) > MaxEnvBytes {
				t.Fatal("kept more than MaxEnvBytes")
			}
		}
		if pathErr == nil {
			if len(j.stepPath) > MaxPathDirs {
				t.Fatalf("kept %d directories", len(j.stepPath))
			}
			for _, d := range j.stepPath {
				if d == "" || strings.ContainsAny(d, ":\x00") || len(d) > MaxPathDirBytes {
					t.Fatalf("kept directory %q", d)
				}
			}
		}
	})
}
