package domain

import (
	"slices"
	"strings"
)

// RunnerVars are the variables the runner sets for every step from the
// run's facts, as GitHub's default variables (FORGECI_<NAME> too, for the
// GITHUB_ ones): only those whose values mean what GitHub's do (not
// GITHUB_REPOSITORY, GITHUB_ACTOR or GITHUB_JOB: a project is not a
// repository, an actor not a login, a matrix job's name not its id). As
// GitHub's, they override a value the pipeline's env or a step's
// $FORGECI_ENV gives them (the log says so).
var RunnerVars = []string{"GITHUB_SHA", "GITHUB_REF", "GITHUB_REF_NAME", "GITHUB_REF_TYPE", "GITHUB_EVENT_NAME",
	"GITHUB_RUN_ID", "GITHUB_RUN_NUMBER", "GITHUB_WORKFLOW", "GITHUB_HEAD_REF", "GITHUB_BASE_REF", "GITHUB_WORKSPACE",
	"RUNNER_OS", "RUNNER_ARCH", "RUNNER_NAME", "RUNNER_TEMP"}

// StepFileVars name a step's own files (its outputs, environment, PATH
// and summary files): the runner sets them for each step.
var StepFileVars = []string{"FORGECI_OUTPUT", "GITHUB_OUTPUT", "FORGECI_ENV", "GITHUB_ENV", "FORGECI_PATH", "GITHUB_PATH",
	"FORGECI_STEP_SUMMARY", "GITHUB_STEP_SUMMARY"}

// ShellReadonlyVars are read-only in bash: a step's environment that set
// one could not be loaded, and the step would not start.
var ShellReadonlyVars = []string{"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"}

// ReservedVarReason says why a pipeline's env, or a step's $FORGECI_ENV,
// may not set the variable name ("" if it may; RunnerVars it may, and the
// runner's value wins).
func ReservedVarReason(name string) string {
	switch {
	case slices.Contains(StepFileVars, name):
		return name + " names a file of each step, set by the runner"
	case strings.HasPrefix(name, "FORGECI_"):
		return "names starting with FORGECI_ are reserved"
	case slices.Contains(ShellReadonlyVars, name):
		return name + " is read-only in bash: no step could start with it set"
	}
	return ""
}

// readsJobStatus reports whether a step's fields or the job's outputs
// name job.status, the runner's to fill in.
func (s JobSpec) readsJobStatus() bool {
	reads := func(v string) bool { return strings.Contains(v, "job.status") }
	for _, st := range s.Steps {
		if reads(st.Run) || reads(st.If) || reads(st.Name) {
			return true
		}
		for _, v := range st.Env {
			if reads(v) {
				return true
			}
		}
	}
	for _, v := range s.Outputs {
		if reads(v) {
			return true
		}
	}
	return false
}

// namesAddMask reports whether a script names the ::add-mask:: command.
func namesAddMask(script string) bool { return strings.Contains(script, "add-mask") }
