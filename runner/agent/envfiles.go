package agent

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A step's environment files, as GitHub's: what a step writes to
// $FORGECI_ENV (also $GITHUB_ENV) sets variables for the steps after it,
// and each line it writes to $FORGECI_PATH (also $GITHUB_PATH) puts a
// directory at the front of their PATH. The values stay on the runner.
// What it writes to $FORGECI_STEP_SUMMARY (also $GITHUB_STEP_SUMMARY) is
// printed in the log after it.

const (
	// MaxEnvBytes bounds the variables the steps set, NAME=value
	// together: each later step's process gets them all, and the kernel
	// refuses an environment over ARG_MAX (2 MiB at the least), the
	// pipeline's env and the secrets included.
	MaxEnvBytes = 256 << 10
	// MaxEnvEntryBytes is the kernel's bound on one NAME=value
	// (MAX_ARG_STRLEN, its NUL included).
	MaxEnvEntryBytes = 128<<10 - 1
	// MaxPathDirs bounds the directories the steps add to PATH, and
	// MaxPathDirBytes each one.
	MaxPathDirs     = 100
	MaxPathDirBytes = 4096
)

// envNameRE is a variable's name a step may set.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,255}$`)

// stepFileVars are the variables the runner sets for each step, naming
// its files: a step may not set them for the next.
var stepFileVars = []string{"FORGECI_OUTPUT", "GITHUB_OUTPUT", "FORGECI_ENV", "GITHUB_ENV", "FORGECI_PATH", "GITHUB_PATH",
	"FORGECI_STEP_SUMMARY", "GITHUB_STEP_SUMMARY"}

// stepFiles are one step's files (isolate.Box.NewStepFile).
type stepFiles struct {
	output, env, path, summary string
}

// newStepFiles makes a step's files.
func (j *job) newStepFiles() (stepFiles, error) {
	var f stepFiles
	var err error
	if f.output, err = j.box.NewStepFile("output"); err != nil {
		return f, err
	}
	if f.env, err = j.box.NewStepFile("env"); err != nil {
		return f, err
	}
	if f.path, err = j.box.NewStepFile("path"); err != nil {
		return f, err
	}
	f.summary, err = j.box.NewStepFile("summary")
	return f, err
}

// list is the files, for the step to write.
func (f stepFiles) list() []string { return []string{f.output, f.env, f.path, f.summary} }

// vars are the variables that name the files to the step.
func (f stepFiles) vars() []string {
	return []string{"FORGECI_OUTPUT=" + f.output, "GITHUB_OUTPUT=" + f.output, "FORGECI_ENV=" + f.env,
		"GITHUB_ENV=" + f.env, "FORGECI_PATH=" + f.path, "GITHUB_PATH=" + f.path,
		"FORGECI_STEP_SUMMARY=" + f.summary, "GITHUB_STEP_SUMMARY=" + f.summary}
}

// readStepFiles reads what a step wrote to its files when it ended, as
// GitHub does whether it passed or failed: its outputs are returned, and
// the variables and directories it set are kept for the later steps. A
// file that does not parse, or would pass a bound, changes nothing and is
// an error, which fails the step.
func (j *job) readStepFiles(f stepFiles) (map[string]string, []error) {
	var errs []error
	var outputs map[string]string
	raw, err := j.box.ReadStepFile(f.output, "FORGECI_OUTPUT")
	if err == nil {
		outputs, err = parseOutputs(raw)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("the step's outputs are not read: %w", err))
		outputs = nil
	}
	if raw, err = j.box.ReadStepFile(f.env, "FORGECI_ENV"); err == nil {
		err = j.setEnv(raw)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("the variables the step set ($FORGECI_ENV) are not kept: %w", err))
	}
	if raw, err = j.box.ReadStepFile(f.path, "FORGECI_PATH"); err == nil {
		err = j.addPath(raw)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("the directories the step added to PATH ($FORGECI_PATH) are not kept: %w", err))
	}
	j.printSummary(f.summary)
	return outputs, errs
}

// printSummary prints what a step wrote to its summary file in the log,
// masked as the log is. It is for people to read: a summary that cannot
// be read is said, and does not fail the step, as GitHub's.
func (j *job) printSummary(file string) {
	raw, err := j.box.ReadStepFile(file, "FORGECI_STEP_SUMMARY")
	switch {
	case err != nil:
		fmt.Fprintf(j.logs, "==> the step's summary is not shown: %v\n", err)
	case len(raw) > 0:
		fmt.Fprintf(j.logs, "==> step summary ($FORGECI_STEP_SUMMARY, %d bytes):\n", len(raw))
		if raw[len(raw)-1] != '\n' {
			raw = append(raw, '\n')
		}
		_, _ = j.logs.Write(raw)
	}
}

// setEnv keeps the variables of a step's $FORGECI_ENV for the later steps.
func (j *job) setEnv(raw []byte) error {
	vars, err := parseAssignments(raw, envNameRE.MatchString, -1)
	if err != nil {
		return err
	}
	for name, v := range vars {
		switch {
		case strings.ContainsRune(name+v, 0):
			return fmt.Errorf("%s holds a NUL byte", name)
		case len(name)+1+len(v) > MaxEnvEntryBytes:
			return fmt.Errorf("%s is %d bytes with its value, over %d", name, len(name)+1+len(v), MaxEnvEntryBytes)
		case slices.Contains(stepFileVars, name):
			return fmt.Errorf("%s names a file of each step, set by the runner", name)
		case j.claim.Secrets[name] != "" || j.idTokenEnv[name] != "":
			return fmt.Errorf("%s is set by the runner (a secret, or where to ask for identity tokens)", name)
		}
	}
	next := mergeEnv(j.stepEnv, vars)
	if n := envBytes(next); n > MaxEnvBytes {
		return fmt.Errorf("the variables the steps set would be %d bytes, over %d", n, MaxEnvBytes)
	}
	j.stepEnv = next
	return nil
}

// addPath puts the directories of a step's $FORGECI_PATH, one a line, at
// the front of the later steps' PATH: the last line first.
func (j *job) addPath(raw []byte) error {
	var dirs []string
	for i, line := range strings.Split(strings.ReplaceAll(string(raw), "\r\n", "\n"), "\n") {
		switch {
		case line == "":
			continue
		case strings.ContainsAny(line, "\x00:"):
			return fmt.Errorf("line %d holds a NUL byte or a colon: one directory a line", i+1)
		case len(line) > MaxPathDirBytes:
			return fmt.Errorf("line %d is %d bytes, over %d", i+1, len(line), MaxPathDirBytes)
		}
		dirs = append([]string{line}, dirs...)
	}
	if len(j.stepPath)+len(dirs) > MaxPathDirs {
		return fmt.Errorf("the steps would add %d directories to PATH, over %d", len(j.stepPath)+len(dirs), MaxPathDirs)
	}
	j.stepPath = append(dirs, j.stepPath...)
	return nil
}

// jobEnv is the job's env as a step sees it before its own: the
// pipeline's, then what earlier steps set.
func (j *job) jobEnv() map[string]string {
	if len(j.stepEnv) == 0 {
		return j.claim.Job.Env
	}
	return mergeEnv(j.claim.Job.Env, j.stepEnv)
}

// withPath puts the directories the steps added at the front of path.
func (j *job) withPath(path string) string {
	if len(j.stepPath) == 0 {
		return path
	}
	return strings.Join(j.stepPath, ":") + ":" + path
}

func envBytes(vars map[string]string) int {
	n := 0
	for k, v := range vars {
		n += len(k) + 1 + len(v)
	}
	return n
}
