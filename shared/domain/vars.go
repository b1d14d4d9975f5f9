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

// mentions reports whether a string the runner evaluates (a step's
// fields, the job's env, outputs, cache keys or name) holds needle: the
// job then needs a runner that knows what it names.
func (s JobSpec) mentions(needle string) bool {
	found := false
	look := func(v string) { found = found || strings.Contains(v, needle) }
	for _, st := range s.Steps {
		look(st.Run)
		look(st.If)
		look(st.Name)
		for _, v := range st.Env {
			look(v)
		}
	}
	for _, m := range []map[string]string{s.Env, s.Outputs} {
		for _, v := range m {
			look(v)
		}
	}
	if s.Cache != nil {
		look(s.Cache.Key)
		for _, k := range s.Cache.RestoreKeys {
			look(k)
		}
	}
	look(s.DisplayName)
	return found
}

// namesAddMask reports whether a script names the ::add-mask:: command.
func namesAddMask(script string) bool { return strings.Contains(script, "add-mask") }
