package agent

import (
	"fmt"
	"maps"

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
// success(): no step has failed), in order. It returns whether a step
// failed the job and the exit code to report.
func (j *job) runSteps() (failed bool, exit int) {
	seq := &sequence{steps: map[string]any{}}
	steps := j.claim.Job.Steps
	for i, st := range steps {
		if j.stopped() != nil {
			return true, seq.exit
		}
		run, err := j.condition(st, seq)
		if err != nil {
			fmt.Fprintf(j.logs, "==> step %d/%d: %s: if: %v\n", i+1, len(steps), st.Name, err)
			seq.failed, seq.exit = true, 1
			continue
		}
		if !run {
			fmt.Fprintf(j.logs, "==> step %d/%d: %s skipped (if: %s was false)\n", i+1, len(steps), st.Name, ifText(st))
			seq.record(st, "skipped", "skipped", nil)
			continue
		}
		fmt.Fprintf(j.logs, "==> step %d/%d: %s\n", i+1, len(steps), st.Name)
		code, outputs := j.runStep(st)
		if j.stopped() != nil {
			return true, code
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
		switch {
		case code == 0:
			seq.record(st, "success", "success", outputs)
		case st.ContinueOnError:
			fmt.Fprintf(j.logs, "==> step %q failed with exit code %d; continuing (continue-on-error)\n", st.Name, code)
			seq.record(st, "failure", "success", outputs)
		default:
			fmt.Fprintf(j.logs, "==> step %q failed with exit code %d\n", st.Name, code)
			seq.record(st, "failure", "failure", outputs)
			if !seq.failed {
				seq.failed, seq.exit = true, code
			}
		}
	}
	return seq.failed, seq.exit
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
// also github.*), the matrix, the environment and the steps so far; the
// status functions read the sequence.
func (j *job) condition(st domain.Step, seq *sequence) (bool, error) {
	src := ifText(st)
	e, perr := expr.Parse(src)
	if perr != nil {
		return false, perr
	}
	env := map[string]any{}
	for k, v := range j.claim.Job.Env {
		env[k] = v
	}
	for k, v := range st.Env {
		env[k] = v
	}
	matrix := map[string]any{}
	for k, v := range j.claim.Job.Matrix {
		matrix[k] = v
	}
	run := expr.FromGo(j.claim.Job.Run)
	c := &expr.Context{Vars: map[string]any{"matrix": matrix, "env": env, "steps": maps.Clone(seq.steps),
		"forgeci": run, "github": run},
		Status: func(name string) bool {
			switch name {
			case "success":
				return !seq.failed
			case "failure":
				return seq.failed
			case "always":
				return true
			}
			return false // cancelled(): a cancelled job's steps are stopped
		}}
	v, err := e.Eval(c)
	if err != nil {
		return false, err
	}
	// A condition that calls no status function holds only while no step
	// has failed, as GitHub's do (success() && ...).
	return expr.Truthy(v) && (e.CallsStatus() || !seq.failed), nil
}
