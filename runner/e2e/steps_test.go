package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// stepsPipeline exercises what a runner declaring the steps feature does:
// an output read by a later if:, a flaky step that continues on error, a
// step skipped by its condition, a python shell, a working directory, a
// failure, and the cleanup steps that run after it.
const stepsPipeline = `jobs:
  steps:
    runs-on: linux
    strategy: {matrix: {os: [linux]}}
    steps:
      - id: v
        run: |
          echo "version=1.2.3" >> "$FORGECI_OUTPUT"
          { echo 'notes<<EOF'; echo 'line one'; echo 'line two'; echo EOF; } >> "$GITHUB_OUTPUT"
      - if: steps.v.outputs.version == '1.2.3' && matrix.os == 'linux'
        run: echo "saw version"
      - if: github.event_name == 'submit' && forgeci.run_number > 0 && forgeci.repository != ''
        run: echo "a submitted run"
      - if: steps.v.outputs.version == '9'
        run: echo "must not run"
      - id: flaky
        continue-on-error: true
        run: exit 4
      - if: steps.flaky.outcome == 'failure' && steps.flaky.conclusion == 'success'
        run: echo "flaky failed and was tolerated"
      - shell: python
        run: print("from", "python")
      - run: mkdir -p sub/dir && touch sub/dir/here
      - working-directory: sub/dir
        run: test -f here && echo "in sub/dir"
      - run: exit 7
      - run: echo "must not run after the failure"
      - if: failure()
        run: echo "cleanup after failure"
      - if: always()
        run: echo "always runs"
  outputs-cap:
    runs-on: linux
    steps:
      - id: a
        run: printf 'big=%0700000d\n' 0 >> "$FORGECI_OUTPUT"
      - id: b
        run: printf 'big=%0700000d\n' 0 >> "$FORGECI_OUTPUT"
`

func testStepFeatures(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		id, err := s.submit(writePipeline(t, stepsPipeline), false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool {
			return v.State == "FAILED" && v.Jobs[0].State != "RUNNING" && v.Jobs[1].State != "RUNNING"
		}, 90*time.Second)
		type job = struct {
			ID, Name, State, Reason string
			Generation              int
		}
		jobs := map[string]job{}
		for _, j := range v.Jobs {
			jobs[j.Name] = j
		}
		capLog := s.log(id, jobs["outputs-cap"].ID)
		if jobs["outputs-cap"].State != "FAILED" || !strings.Contains(capLog, "step outputs would pass 1048576 bytes") {
			t.Errorf("a job's outputs past 1 MiB: %+v\n%s", jobs["outputs-cap"], capLog)
		}
		j := jobs["steps (linux)"]
		log := s.log(id, j.ID)
		if j.State != "FAILED" || j.Reason != "exit_code 7" {
			t.Fatalf("job %+v: want FAILED with exit_code 7 (the failed step's, not the tolerated one's); log:\n%s", j, log)
		}
		for _, want := range []string{"saw version", "a submitted run", "skipped (if: steps.v.outputs.version == '9' was false)",
			"failed with exit code 4; continuing (continue-on-error)", "flaky failed and was tolerated",
			"from python", "in sub/dir", "failed with exit code 7", "cleanup after failure", "always runs",
			"skipped (if: success() was false)"} {
			if !strings.Contains(log, want) {
				t.Errorf("log lacks %q:\n%s", want, log)
			}
		}
		for _, never := range []string{"must not run\n", "must not run after the failure\n"} {
			if strings.Contains(log, "\n"+never) {
				t.Errorf("log has %q:\n%s", never, log)
			}
		}
	}
}

// envFilesPipeline: a step sets variables ($GITHUB_ENV, a multi-line one
// on $FORGECI_ENV) and adds a directory to PATH ($GITHUB_PATH) for the
// steps after it, as GitHub's do; a step's own env still wins, if: reads
// the value, and a step that tries to set a step file's variable fails,
// changing nothing. A step's summary ($GITHUB_STEP_SUMMARY) is printed in
// the log after it. A value the step asks to mask (::add-mask::) is
// masked in every line after. GitHub's default variables hold the run's
// facts; job.status says how the job stands; vars holds the project's
// variables.
const envFilesPipeline = `run-name: 'Env files #${{ github.run_number }} by ${{ github.event_name }}'
env: {GREETING: from-pipeline, KEEP: pipeline}
jobs:
  envfiles:
    runs-on: linux
    steps:
      - run: |
          echo "GREETING=from-step" >> "$GITHUB_ENV"
          { echo 'NOTES<<EOF'; echo 'line one'; echo 'line two'; echo EOF; } >> "$FORGECI_ENV"
          mkdir -p tools && printf '#!/bin/sh\necho "mytool ran"\n' > tools/mytool && chmod +x tools/mytool
          echo "$PWD/tools" >> "$GITHUB_PATH"
          echo "same step: $GREETING"
          TOKEN="generated-$FORGECI_RUN_ID-token"; echo "::add-mask::$TOKEN"; echo "TOKEN=$TOKEN" >> "$GITHUB_ENV"
          { echo '## Summary'; echo; echo '| tests | passed |'; printf '| 3 | 3 |'; } >> "$GITHUB_STEP_SUMMARY"
      - run: |
          echo "next step: $GREETING / $KEEP"
          printf 'notes: %s\n' "$NOTES" | tr '\n' '|'; echo
          mytool
          echo "the token is $TOKEN, job ${{ job.status }}, region ${{ vars.E2E_REGION }}"
          echo "facts: $GITHUB_EVENT_NAME $GITHUB_RUN_ID $RUNNER_OS ${#GITHUB_SHA} $GITHUB_REF_TYPE"
      - env: {GREETING: from-step-env}
        run: echo "step env wins, $GREETING"
      - if: env.GREETING == 'from-step'
        run: echo "if saw ${{ env.GREETING }}"
      - run: echo "GITHUB_OUTPUT=/tmp/elsewhere" >> "$GITHUB_ENV"; echo "KEEP=changed" >> "$GITHUB_ENV"
      - if: always()
        run: echo "after the refused, $KEEP $GITHUB_OUTPUT, job ${{ job.status }}"
`

func testEnvFiles(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		if out, err := s.cli("var", "set", "E2E_REGION", "eu-north-1", "-p", "e2e"); err != nil {
			t.Fatalf("forgeci var set: %v\n%s", err, out)
		}
		id, err := s.submit(writePipeline(t, envFilesPipeline), false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "FAILED" || v.State == "PASSED" }, 60*time.Second)
		j := v.Jobs[0]
		log := s.log(id, j.ID)
		if j.State != "FAILED" || j.Reason != "exit_code 1" {
			t.Fatalf("job %+v: want FAILED by the refused variable; log:\n%s", j, log)
		}
		for _, want := range []string{"same step: from-pipeline", "next step: from-step / pipeline",
			"notes: line one|line two|", "mytool ran", "step env wins, from-step-env", "if saw from-step",
			"GITHUB_OUTPUT names a file of each step, set by the runner", "after the refused, pipeline /",
			"same step: from-pipeline\n::add-mask::***\n==> step summary ($FORGECI_STEP_SUMMARY, 40 bytes):\n## Summary\n\n| tests | passed |\n| 3 | 3 |\n==> step 2/6"} {
			if !strings.Contains(log, want) {
				t.Errorf("log lacks %q:\n%s", want, log)
			}
		}
		if out, err := s.cli("runs", id); err != nil || !regexp.MustCompile(`(?m)^name Env files #\d+ by submit$`).MatchString(out) {
			t.Errorf("the run's name (run-name): %v\n%s", err, out)
		}
		if !strings.Contains(log, "facts: submit "+id+" Linux ") {
			t.Errorf("the run's facts are not in GitHub's default variables:\n%s", log)
		}
		if strings.Contains(log, "generated-"+id) || !strings.Contains(log, "::add-mask::***\n") || !strings.Contains(log, "the token is ***, job success, region eu-north-1\n") {
			t.Errorf("a value the step asked to mask (::add-mask::) is in the log:\n%s", log)
		}
		if _, after, _ := strings.Cut(log, "after the refused, "); !strings.Contains(after, "/steps/output-") || !strings.Contains(after, ", job failure\n") {
			t.Errorf("the refused variable reached a later step:\n%s", log)
		}
	}
}
