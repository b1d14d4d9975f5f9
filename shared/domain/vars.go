package domain

import (
	"regexp"
	"slices"
	"strings"
)

// StepFileVars name a step's own files (its outputs, environment, PATH
// and summary files): the runner sets them for each step.
var StepFileVars = []string{"FORGECI_OUTPUT", "GITHUB_OUTPUT", "FORGECI_ENV", "GITHUB_ENV", "FORGECI_PATH", "GITHUB_PATH",
	"FORGECI_STEP_SUMMARY", "GITHUB_STEP_SUMMARY"}

// ShellReadonlyVars are read-only in bash: a step's environment that set
// one could not be loaded, and the step would not start.
var ShellReadonlyVars = []string{"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"}

// ReservedVarReason says why a pipeline's env, or a step's $FORGECI_ENV,
// may not set the variable name ("" if it may; GitHub's default variables
// it may, and the runner's value wins).
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

// Contexts named in an expression, as the parser reads them: any case,
// not as a property (forgeci.job is a fact, not the job context).
var (
	varsContextRE = LazyRegexp(`(?i)(^|[^.\w])vars\b`)
	jobContextRE  = LazyRegexp(`(?i)(^|[^.\w])job\b`)
)

// mentions reports whether an expression the runner evaluates (inside a
// ${{ }} of a step's fields, the job's env, outputs, cache keys or name,
// or a step's if:) names the context re matches: the job then needs a
// runner that has it. Text outside ${{ }} (a script's group_vars.yml) is
// not an expression.
func (s JobSpec) mentions(re *regexp.Regexp) bool {
	found := false
	look := func(v string) {
		for rest := v; !found; {
			i := strings.Index(rest, "${{")
			if i < 0 {
				return
			}
			rest = rest[i+3:]
			j := strings.Index(rest, "}}")
			if j < 0 {
				j = len(rest)
			}
			found = re.MatchString(rest[:j])
			rest = rest[j:]
		}
	}
	for _, st := range s.Steps {
		look(st.Run)
		look(st.Name)
		found = found || re.MatchString(st.If)
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
