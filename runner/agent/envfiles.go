package agent

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
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
		errs = append(errs, fmt.Errorf("the variables the step set ($FORGECI_ENV, $GITHUB_ENV) are not kept: %w", err))
	}
	if raw, err = j.box.ReadStepFile(f.path, "FORGECI_PATH"); err == nil {
		err = j.addPath(raw)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("the directories the step added to PATH ($FORGECI_PATH, $GITHUB_PATH) are not kept: %w", err))
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

// setEnv keeps the variables of a step's $FORGECI_ENV for the later
// steps. As GitHub's, their values are not masked (a step masks a value
// with ::add-mask::).
func (j *job) setEnv(raw []byte) error {
	vars, err := parseAssignments(raw, envNameRE.MatchString, -1)
	if err != nil {
		return err
	}
	for name, v := range vars {
		_, secret := j.claim.Secrets[name]
		switch {
		case len(name)+1+len(v) > MaxEnvEntryBytes:
			return fmt.Errorf("%s is %d bytes with its value, over %d", name, len(name)+1+len(v), MaxEnvEntryBytes)
		case domain.ReservedVarReason(name) != "":
			return errors.New(domain.ReservedVarReason(name))
		case secret:
			return fmt.Errorf("%s is one of the job's secrets, set by the runner", name)
		}
	}
	next := mergeEnv(j.stepEnv, vars)
	if err := j.checkEnvSize(next, j.stepPath); err != nil {
		return err
	}
	j.stepEnv = next
	return nil
}

// addPath puts the directories of a step's $FORGECI_PATH, one a line, at
// the front of the later steps' PATH: the last line first. A directory
// already there moves to the front, as GitHub's.
func (j *job) addPath(raw []byte) error {
	last := map[string]int{} // each directory's last line
	for i, line := range strings.Split(strings.ReplaceAll(string(raw), "\r\n", "\n"), "\n") {
		_, seen := last[line]
		switch {
		case line == "":
			continue
		case strings.ContainsAny(line, "\x00:"):
			return fmt.Errorf("line %d holds a NUL byte or a colon: one directory a line", i+1)
		case len(line) > MaxPathDirBytes:
			return fmt.Errorf("line %d is %d bytes, over %d", i+1, len(line), MaxPathDirBytes)
		case !seen && len(last) == MaxPathDirs:
			// Checked as it goes: the file may hold half a million lines.
			return fmt.Errorf("more than %d directories", MaxPathDirs)
		}
		last[line] = i
	}
	next := slices.Collect(maps.Keys(last))
	slices.SortFunc(next, func(a, b string) int { return last[b] - last[a] })
	for _, d := range j.stepPath {
		if _, ok := last[d]; !ok {
			next = append(next, d)
		}
	}
	if len(next) > MaxPathDirs {
		return fmt.Errorf("the steps would add %d directories to PATH, over %d", len(next), MaxPathDirs)
	}
	if err := j.checkEnvSize(j.stepEnv, next); err != nil {
		return err
	}
	j.stepPath = next
	return nil
}

// checkEnvSize holds what the steps set to MaxEnvBytes together, and the
// PATH they make to what the kernel takes of one variable: past either,
// every later step would fail to start.
func (j *job) checkEnvSize(env map[string]string, path []string) error {
	added := len(strings.Join(path, ":"))
	if n := envBytes(env) + added; n > MaxEnvBytes {
		return fmt.Errorf("the variables and directories the steps set would be %d bytes, over %d", n, MaxEnvBytes)
	}
	base, ok := env["PATH"]
	if !ok {
		base, ok = j.claim.Job.Env["PATH"]
	}
	if !ok {
		base = os.Getenv("PATH")
	}
	if n := len("PATH=") + added + 1 + len(base); added > 0 && n > MaxEnvEntryBytes {
		return fmt.Errorf("PATH would be %d bytes, over %d", n, MaxEnvEntryBytes)
	}
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
