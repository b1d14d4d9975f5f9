package domain

import (
	"slices"
	"strings"
)

// Runner features: what a runner declares in its claim it can do. A job
// that needs one goes only to runners that declare it, so a runner built
// to an earlier protocol never runs a job it would run wrongly.
const (
	// FeatureExpressions: the runner evaluates the ${{ }} left in env
	// values, step names and scripts, cache keys and outputs, with the
	// contexts forgeci, github, env, matrix, steps, needs, inputs and
	// runner, and hashFiles over the workspace.
	FeatureExpressions = "expressions"
	// FeatureOutputs: the runner evaluates the job's outputs mapping when
	// its steps end and sends it to /v1/runner/jobs/{job_id}/outputs.
	FeatureOutputs = "outputs"
	// FeatureSteps: step id, if, shell, working-directory,
	// continue-on-error and $FORGECI_OUTPUT.
	FeatureSteps = "steps"
	// FeatureReports: the runner reads the job's test reports (reports:)
	// and sends their summary (the report route).
	FeatureReports = "reports"
	// FeatureIDToken: the runner serves the job's steps identity tokens
	// (permissions: {id-token: write}) through a per-job socket.
	FeatureIDToken = "id-token"
	// FeatureEnvFiles: the runner gives each step $FORGECI_ENV and
	// $FORGECI_PATH (also $GITHUB_ENV, $GITHUB_PATH) and carries what it
	// writes to them into the later steps, and $FORGECI_STEP_SUMMARY (also
	// $GITHUB_STEP_SUMMARY), printed in the log. A job needs it when a
	// script names one of them.
	FeatureEnvFiles = "env-files"
	// FeatureJobStatus: the runner's expressions read job.status (success,
	// failure or cancelled, as the job stands). A job needs it when a
	// step's fields or the job's outputs name it.
	FeatureJobStatus = "job-status"
	// FeatureAddMask: the runner acts on the ::add-mask:: and
	// ::stop-commands:: lines of a step's output. A job needs it when a
	// script names add-mask: on a runner without it the value would be
	// printed in clear.
	FeatureAddMask = "add-mask"
	// FeatureVars: the runner's expressions have the vars context (the
	// project variables the run was made with, in run.vars). A job needs
	// it when a string the runner evaluates names vars.
	FeatureVars = "vars"
)

// Features are the runner features the job needs, sorted.
func (s JobSpec) Features() []string {
	var out []string
	if s.hasExpressions() {
		out = append(out, FeatureExpressions)
	}
	if s.IDToken {
		out = append(out, FeatureIDToken)
	}
	if len(s.Outputs) > 0 {
		out = append(out, FeatureOutputs)
	}
	if s.Reports != nil {
		out = append(out, FeatureReports)
	}
	for _, st := range s.Steps {
		if st.ID != "" || st.If != "" || len(st.Shell) > 0 || st.WorkingDirectory != "" || st.ContinueOnError {
			out = append(out, FeatureSteps)
			break
		}
	}
	for _, st := range s.Steps {
		if namesEnvFile(st.Run) {
			out = append(out, FeatureEnvFiles)
			break
		}
	}
	if slices.ContainsFunc(s.Steps, func(st Step) bool { return namesAddMask(st.Run) }) {
		out = append(out, FeatureAddMask)
	}
	if s.mentions(jobContextRE()) {
		out = append(out, FeatureJobStatus)
	}
	if s.mentions(varsContextRE()) {
		out = append(out, FeatureVars)
	}
	slices.Sort(out)
	return out
}

// namesEnvFile reports whether a script names $FORGECI_ENV,
// $FORGECI_PATH or $FORGECI_STEP_SUMMARY (or GitHub's names): a script that writes them through
// another file it runs is not seen, and on a runner without the feature
// finds them unset.
func namesEnvFile(script string) bool {
	for _, v := range []string{"FORGECI_ENV", "FORGECI_PATH", "FORGECI_STEP_SUMMARY", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY"} {
		if strings.Contains(script, v) {
			return true
		}
	}
	return false
}
