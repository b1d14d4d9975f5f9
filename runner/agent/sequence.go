package agent

import (
	"fmt"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// sequence is the state of a job's steps as GitHub keeps it: whether a
// step has failed (a step that continues on error does not count), and
// each step with an id's outcome, conclusion and outputs, for later
// steps' if: (steps.<id>...).
type sequence struct {
	failed      bool
	outputBytes int // of every step's outputs so far
	exit        int // of the step that failed the job, else 0
	steps       map[string]any
}

// runSteps runs the job's steps: each whose if: holds (by default,
// success(): no step has failed), in order. It returns the sequence:
// whether a step failed the job, the exit code to report, and what the
// job's outputs read.
func (j *job) runSteps() *sequence {
	seq := &sequence{steps: map[string]any{}}
	steps := j.claim.Job.Steps
	for i, st := range steps {
		if j.stopped() != nil {
			seq.failed = true
			return seq
		}
		// Each step is a section of the log from its "==> step" line,
		// with its times, exit code and conclusion (logAppender).
		j.logs.stepStarted(i, st.Name)
		run, err := j.condition(st, seq)
		if err != nil {
			fmt.Fprintf(j.logs, "==> step %d/%d: %s: if: %v\n", i+1, len(steps), st.Name, err)
			seq.fail(1)
			j.logs.stepEnded(i, "", nil, "failure")
			continue
		}
		if !run {
			fmt.Fprintf(j.logs, "==> step %d/%d: %s skipped (if: %s was false)\n", i+1, len(steps), st.Name, ifText(st))
			seq.record(st, "skipped", "skipped", nil)
			j.logs.stepEnded(i, "", nil, "skipped")
			continue
		}
		resolved, err := j.resolveStep(st, seq)
		if err != nil {
			fmt.Fprintf(j.logs, "==> step %d/%d: %s: %v\n", i+1, len(steps), st.Name, err)
			seq.end(j, st, 1, nil)
			j.logs.stepEnded(i, "", nil, "failure")
			continue
		}
		fmt.Fprintf(j.logs, "==> step %d/%d: %s\n", i+1, len(steps), resolved.Name)
		code, outputs := j.runStep(resolved)
		if j.stopped() != nil {
			seq.failed, seq.exit = true, code
			j.logs.stepEnded(i, resolved.Name, &code, "cancelled")
			return seq
		}
		if n := outputsSize(outputs); seq.outputBytes+n > MaxJobOutputBytes {
			fmt.Fprintf(j.logs, "==> the job's step outputs would pass %d bytes; this step's are refused\n", MaxJobOutputBytes)
			outputs = nil
			if code == 0 {
				code = 1
			}
		} else {
			seq.outputBytes += n
		}
		j.logs.stepEnded(i, resolved.Name, &code, seq.end(j, resolved, code, outputs))
	}
	return seq
}

// end records a step that ran (or could not start) with its exit code,
// and returns its conclusion.
func (s *sequence) end(j *job, st domain.Step, code int, outputs map[string]string) string {
	switch {
	case code == 0:
		s.record(st, "success", "success", outputs)
		return "success"
	case st.ContinueOnError:
		fmt.Fprintf(j.logs, "==> step %q failed with exit code %d; continuing (continue-on-error)\n", st.Name, code)
		s.record(st, "failure", "success", outputs)
		return "success"
	default:
		fmt.Fprintf(j.logs, "==> step %q failed with exit code %d\n", st.Name, code)
		s.record(st, "failure", "failure", outputs)
		s.fail(code)
		return "failure"
	}
}

// fail marks the job failed; the first failing step's code is reported.
func (s *sequence) fail(code int) {
	if !s.failed {
		s.failed, s.exit = true, code
	}
}

// status answers the status functions of a step's if:.
func (s *sequence) status(name string) bool {
	switch name {
	case "success":
		return !s.failed
	case "failure":
		return s.failed
	case "always":
		return true
	}
	return false // cancelled(): a cancelled job's steps are stopped
}

// MaxJobOutputBytes bounds the outputs of all a job's steps together:
// the runner keeps them, and every if: may read them all.
const MaxJobOutputBytes = 1 << 20

func outputsSize(outputs map[string]string) int {
	n := 0
	for k, v := range outputs {
		n += len(k) + len(v)
	}
	return n
}

func ifText(st domain.Step) string {
	if st.If == "" {
		return "success()"
	}
	return st.If
}

func (s *sequence) record(st domain.Step, outcome, conclusion string, outputs map[string]string) {
	if st.ID == "" {
		return
	}
	out := map[string]any{}
	for k, v := range outputs {
		out[k] = v
	}
	s.steps[st.ID] = map[string]any{"outcome": outcome, "conclusion": conclusion, "outputs": out}
}

// condition evaluates a step's if: against the run's facts (forgeci.*,
// also github.*), the matrix, the environment, the steps so far and the
// needs; the status functions read the sequence.
func (j *job) condition(st domain.Step, seq *sequence) (bool, error) {
	src := ifText(st)
	e, perr := expr.Parse(src)
	if perr != nil {
		return false, perr
	}
	env, err := j.expandEnv(st.Env, j.exprContext(seq, j.jobEnv()))
	if err != nil {
		return false, err
	}
	v, err := e.Eval(j.exprContext(seq, mergeEnv(j.jobEnv(), env)))
	if err != nil {
		return false, err
	}
	// A condition that calls no status function holds only while no step
	// has failed, as GitHub's do (success() && ...).
	return expr.Truthy(v) && (e.CallsStatus() || !seq.failed), nil
}
