package agent

import (
	"context"
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
		"no equals\n":                                 "not NAME=value",
		"1BAD=x\n":                                    `"1BAD" is not a valid name`,
		"my-var=x\n":                                  `"my-var" is not a valid name`,
		"OK=1\nGITHUB_ENV=/tmp/x\n":                   "GITHUB_ENV names a file of each step",
		"FORGECI_OUTPUT=/tmp/x\n":                     "FORGECI_OUTPUT names a file",
		"DEPLOY_KEY=mine\n":                           "DEPLOY_KEY is one of the job's secrets",
		"FORGECI_ID_TOKEN_SOCKET=/evil\n":             "names starting with FORGECI_ are reserved",
		"FORGECI_RUN_ID=spoofed\n":                    "names starting with FORGECI_ are reserved",
		"UID=0\n":                                     "UID is read-only in bash",
		"GITHUB_STEP_SUMMARY=/x\n":                    "names a file of each step",
		"X<<EOF\nnever closed\n":                      "not closed",
		"NUL=a\x00b\n":                                "NUL",
		"PATH=" + strings.Repeat("/p", 70<<10) + "\n": "over 131071",
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
		manyDirs(MaxPathDirs+1, 1):                 "more than 100 directories",
		manyDirs(MaxPathDirs, MaxPathDirBytes-8):   "over 262144",
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
	f.Add([]byte(strings.Repeat("/\n", 30000)))
	f.Add([]byte(manyDirs(2000, 20)))
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

func manyDirs(n, size int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "/%0*d\n", size, i)
	}
	return b.String()
}

// TestStepPathOrderAndBounds: a directory added again moves to the
// front, once; a PATH longer than the kernel takes of one variable is
// refused; and a step file of half a million lines is read in linear
// time (it was quadratic, minutes of the runner's CPU outside the job's
// cgroup).
func TestStepPathOrderAndBounds(t *testing.T) {
	j := envJob()
	for _, file := range []string{"/a\n/b\n/a\n", "/c\n/b\n"} {
		if err := j.addPath([]byte(file)); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(j.stepPath, ":") != "/b:/c:/a" {
		t.Fatalf("PATH added %v, want /b:/c:/a", j.stepPath)
	}
	j = envJob()
	if err := j.setEnv([]byte("PATH=" + strings.Repeat("/p", 60<<10) + "\n")); err != nil {
		t.Fatal(err)
	}
	if err := j.addPath([]byte(manyDirs(3, 4000))); err == nil || !strings.Contains(err.Error(), "PATH would be") {
		t.Fatalf("a PATH over MAX_ARG_STRLEN: %v", err)
	}
	for _, line := range []string{"/\n", "/x:\n"} {
		j = envJob()
		big := []byte(strings.Repeat(line, (1<<20)/len(line)))
		start := time.Now()
		err := j.addPath(big)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("%d lines of %q took %v", len(big)/len(line), line, d)
		}
		if (err == nil) != (line == "/\n") {
			t.Fatalf("%q: %v", line, err)
		}
	}
	j = envJob()
	start := time.Now()
	if err := j.addPath([]byte(manyDirs(1<<20/10, 8))); err == nil || time.Since(start) > time.Second {
		t.Fatalf("a million bytes of directories: %v in %v", err, time.Since(start))
	}
}

// TestStepEnvNotMasked: as GitHub's, a value set with $GITHUB_ENV is not
// masked for its name (CACHE_KEY=linux-node-20 would mask every
// linux-node-20, and a job output holding it would be dropped).
func TestStepEnvNotMasked(t *testing.T) {
	j := envJob()
	j.logs = newLogAppender(nil, nil)
	if err := j.setEnv([]byte("CACHE_KEY=linux-node-20\nAPI_TOKEN=visible-value\n")); err != nil {
		t.Fatal(err)
	}
	_, _ = j.logs.Write([]byte("key linux-node-20 token visible-value\n"))
	j.logs.mu.Lock()
	_ = j.logs.mask.Close()
	out := j.logs.pending.String()
	j.logs.mu.Unlock()
	if out != "key linux-node-20 token visible-value\n" {
		t.Fatalf("log: %q", out)
	}
}

// TestRunVars: a step gets the run's facts as GitHub's default variables
// (those whose values mean GitHub's) and as FORGECI_<NAME>, over the
// pipeline's env, as GitHub's.
func TestRunVars(t *testing.T) {
	j := envJob()
	j.claim.Lease.RunID = "run-1"
	j.logs = newLogAppender(nil, nil)
	// The pipeline's own value of a runner's variable is not used (and the
	// log says so); one the runner does not set is the pipeline's.
	j.claim.Job.Env = map[string]string{"A": "pipeline", "GITHUB_SHA": "spoofed", "GITHUB_REPOSITORY": "acme/mine"}
	j.claim.Job.Run = &domain.RunFacts{Ref: "refs/tags/v1.2", RefName: "v1.2", SHA: "abc123", EventName: "push",
		Actor: "ann", Repository: "acme/app", RunNumber: 42, Workflow: "ci", HeadRef: "", BaseRef: ""}
	env := map[string]string{}
	for _, kv := range j.env(domain.Step{}) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, want := range map[string]string{"GITHUB_SHA": "abc123", "FORGECI_SHA": "abc123", "GITHUB_REF": "refs/tags/v1.2",
		"GITHUB_REF_NAME": "v1.2", "GITHUB_REF_TYPE": "tag", "GITHUB_EVENT_NAME": "push", "FORGECI_ACTOR": "ann",
		"FORGECI_REPOSITORY": "acme/app", "GITHUB_RUN_ID": "run-1", "GITHUB_RUN_NUMBER": "42", "GITHUB_WORKFLOW": "ci",
		"FORGECI_JOB": "j", "GITHUB_WORKSPACE": "/w", "RUNNER_OS": runnerOS(), "RUNNER_ARCH": runnerArch(), "A": "pipeline",
		"GITHUB_REPOSITORY": "acme/mine"} {
		if got, ok := env[k]; !ok || got != want {
			t.Errorf("%s = %q (set %v), want %q", k, got, ok, want)
		}
	}
	for _, k := range runnerVars {
		if _, ok := env[k]; !ok && k != "RUNNER_TEMP" { // the job's tmp comes with its box
			t.Errorf("%s is not set", k)
		}
	}
	for _, k := range []string{"GITHUB_ACTOR", "GITHUB_JOB"} {
		if v, ok := env[k]; ok {
			t.Errorf("%s = %q: ForgeCI's value would not mean GitHub's", k, v)
		}
	}
	j.logs.mu.Lock()
	_ = j.logs.mask.Close()
	out := j.logs.pending.String()
	j.logs.mu.Unlock()
	if !strings.Contains(out, "==> GITHUB_SHA is the runner's") || strings.Contains(out, "GITHUB_REPOSITORY") {
		t.Fatalf("log: %q", out)
	}
}

// TestJobStatus: job.status is success until a step fails the job,
// failure after, and cancelled once the job is stopped.
func TestJobStatus(t *testing.T) {
	j := envJob()
	ctx, stop := context.WithCancelCause(context.Background())
	j.ctx = ctx
	seq := &sequence{steps: map[string]any{}}
	if got := j.status(seq); got != "success" {
		t.Fatalf("before: %s", got)
	}
	seq.fail(3)
	if got := j.status(seq); got != "failure" {
		t.Fatalf("after a failed step: %s", got)
	}
	stop(ErrCanceled)
	if got := j.status(seq); got != "cancelled" {
		t.Fatalf("stopped: %s", got)
	}
}
