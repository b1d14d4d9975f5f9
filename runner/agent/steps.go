package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
)

// runStep runs one step (by default with bash -e, as GitHub's) in its own
// process group and returns its exit code and the outputs it wrote to
// $FORGECI_OUTPUT; what it wrote to $FORGECI_ENV and $FORGECI_PATH is kept
// for the later steps (readStepFiles). When the job is stopped the whole
// group gets SIGTERM, then SIGKILL after the grace period; when its lease
// is lost, SIGKILL.
func (j *job) runStep(st domain.Step) (int, map[string]string) {
	files, err := j.newStepFiles()
	if err != nil {
		fmt.Fprintf(j.logs, "==> could not prepare the step: %v\n", err)
		return 127, nil
	}
	env := append(j.env(st), files.vars()...)
	cmd, err := j.box.StepCommand(isolate.Step{Script: st.Run, Shell: st.Shell, Dir: st.WorkingDirectory, Env: env,
		Files: files.list()})
	if err != nil {
		fmt.Fprintf(j.logs, "==> could not prepare the step: %v\n", err)
		return 127, nil
	}
	code := j.wait(cmd, st)
	outputs, errs := j.readStepFiles(files)
	if j.maskRefused.Swap(false) {
		// The value may be printed in clear after: the step must not pass
		// as if it were masked.
		errs = append(errs, errors.New("a value the step asked to mask (::add-mask::) could not be masked (said above)"))
	}
	for _, err := range errs {
		fmt.Fprintf(j.logs, "==> %v\n", err)
	}
	if len(errs) > 0 && code == 0 {
		code = 1
	}
	return code, outputs
}

// wait starts cmd and waits for it, stopping it at the step's timeout or
// when the job is stopped; it returns the exit code.
func (j *job) wait(cmd *exec.Cmd, st domain.Step) int {
	ctx := j.ctx
	if st.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(st.TimeoutSeconds)*time.Second)
		defer cancel()
	}
	out, err := j.output(cmd)
	if err != nil {
		fmt.Fprintf(j.logs, "==> could not start the step: %v\n", err)
		return 127
	}
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		out.drain()
		waited <- err
	}()
	select {
	case err = <-waited:
	case <-ctx.Done():
		if j.ctx.Err() == nil {
			fmt.Fprintf(j.logs, "\n==> step timed out after %ds\n", st.TimeoutSeconds)
		}
		pgid := cmd.Process.Pid
		if j.lease.Lost() {
			// Another runner may hold the job by now: nothing of it may
			// go on, so no grace.
			j.killNow(pgid)
			<-waited
			return 137
		}
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case err = <-waited:
		case <-time.After(j.a.cfg.KillGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			err = <-waited
		}
		// Anything the step left running in its group goes too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if err == nil {
			return 124
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code >= 0 {
			return code
		}
		return 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
	}
	if err != nil {
		return 1
	}
	return 0
}

// killNow kills the step's process group and every process of the job
// (its cgroup, when it has one) at once.
func (j *job) killNow(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if err := j.box.Kill(); err != nil {
		j.a.cfg.Log.Error("the job's processes could not be killed", "err", err)
	}
}

// stepOutput copies a step's output into the job's log. The step writes to
// a pipe of its own rather than one exec manages, so that a process it
// leaves running in the background (a server for later steps) does not
// keep the step from ending, and its output keeps going to the log.
type stepOutput struct {
	copied chan struct{}
	filter *commandFilter
}

// output starts cmd with stdout and stderr on a new pipe copied to the log.
func (j *job) output(cmd *exec.Cmd) (*stepOutput, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = j.box.Start(cmd)
	w.Close() // the step's processes hold the only write ends now
	if err != nil {
		r.Close()
		return nil, err
	}
	o := &stepOutput{copied: make(chan struct{}),
		filter: newCommandFilter(j.logs, j.logs.AddMask, func() { j.maskRefused.Store(true) })}
	j.outputs.Add(1)
	go func() {
		defer j.outputs.Done()
		defer close(o.copied)
		defer r.Close()
		_, _ = io.Copy(o.filter, r)
		o.filter.Flush()
	}()
	return o, nil
}

// stepDrainWait is how long a step's end waits for output still in the
// pipe when processes it left behind keep the pipe open.
const stepDrainWait = 200 * time.Millisecond

// drain waits, after the step's process has exited, until its output is
// in the log: until the pipe is closed or, when something the step left
// running holds it open, briefly (so the next step's header comes after
// what the step wrote).
func (o *stepOutput) drain() {
	select {
	case <-o.copied:
	case <-time.After(stepDrainWait):
		// A command the step printed last, unended, is acted on now.
		o.filter.Flush()
	}
}

// env is what a step sees: a minimal base, the job's and step's env, and
// FORGECI_* facts. The runner's own environment (and token) is not passed.
func (j *job) env(st domain.Step) []string {
	c := j.claim
	vars := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": j.ws, "LANG": "C.UTF-8", "CI": "true",
		"FORGECI": "true", "FORGECI_RUN_ID": c.Lease.RunID, "FORGECI_JOB_ID": c.Lease.JobID,
		"FORGECI_JOB_NAME": c.Job.Name, "FORGECI_GENERATION": fmt.Sprint(c.Lease.Generation),
		"FORGECI_WORKSPACE": j.ws,
	}
	if j.box != nil {
		// The job's own, removed with it.
		vars["TMPDIR"] = j.box.TmpDir()
	}
	if vars["PATH"] == "" {
		vars["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	// The pipeline's env, then what earlier steps set ($FORGECI_ENV), then
	// the step's own, as GitHub's; the directories earlier steps added
	// ($FORGECI_PATH) go before the PATH that makes.
	for k, v := range j.jobEnv() {
		vars[k] = v
	}
	for k, v := range st.Env {
		vars[k] = v
	}
	vars["PATH"] = j.withPath(vars["PATH"])
	for k, v := range j.runVars() {
		if old, set := vars[k]; set && old != v && !j.overridden[k] && j.logs != nil {
			if j.overridden == nil {
				j.overridden = map[string]bool{}
			}
			j.overridden[k] = true
			fmt.Fprintf(j.logs, "==> %s is the runner's (the run's facts), as GitHub's: the value the pipeline or a step set is not used\n", k)
		}
		vars[k] = v
	}
	// The runner's own: where this job asks for identity tokens.
	for k, v := range j.idTokenEnv {
		vars[k] = v
	}
	// Secrets last: the pipeline cannot shadow what an admin set.
	for k, v := range c.Secrets {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// runnerVars are the variables the runner sets for every step from the
// run's facts, as GitHub's default variables (FORGECI_<NAME> too, for the
// GITHUB_ ones): only those whose values mean what GitHub's do (not
// GITHUB_REPOSITORY, GITHUB_ACTOR or GITHUB_JOB: a project is not a
// repository, an actor not a login, a matrix job's name not its id). As
// GitHub's, they override a value the pipeline's env or a step's
// $FORGECI_ENV gives them (the log says so).
var runnerVars = []string{"GITHUB_SHA", "GITHUB_REF", "GITHUB_REF_NAME", "GITHUB_REF_TYPE", "GITHUB_EVENT_NAME",
	"GITHUB_RUN_ID", "GITHUB_RUN_NUMBER", "GITHUB_WORKFLOW", "GITHUB_HEAD_REF", "GITHUB_BASE_REF", "GITHUB_WORKSPACE",
	"RUNNER_OS", "RUNNER_ARCH", "RUNNER_NAME", "RUNNER_TEMP"}

// runVars are the run's facts as GitHub's default variables (runnerVars),
// so that a script moved from a workflow reads $GITHUB_SHA or $RUNNER_OS
// as it did, and as FORGECI_<NAME> for the GITHUB_ ones.
func (j *job) runVars() map[string]string {
	var f domain.RunFacts
	if j.claim.Job.Run != nil {
		f = *j.claim.Job.Run
	}
	refType := ""
	switch {
	case strings.HasPrefix(f.Ref, "refs/heads/"):
		refType = "branch"
	case strings.HasPrefix(f.Ref, "refs/tags/"):
		refType = "tag"
	}
	vars := map[string]string{"RUNNER_OS": runnerOS(), "RUNNER_ARCH": runnerArch(), "RUNNER_NAME": hostname()}
	if j.box != nil {
		vars["RUNNER_TEMP"] = j.box.TmpDir()
	}
	for name, v := range map[string]string{"SHA": f.SHA, "REF": f.Ref, "REF_NAME": f.RefName, "REF_TYPE": refType,
		"EVENT_NAME": f.EventName, "RUN_ID": j.claim.Lease.RunID, "RUN_NUMBER": strconv.FormatInt(f.RunNumber, 10),
		"WORKFLOW": f.Workflow, "HEAD_REF": f.HeadRef, "BASE_REF": f.BaseRef, "WORKSPACE": j.ws} {
		vars["GITHUB_"+name], vars["FORGECI_"+name] = v, v
	}
	// ForgeCI's own, not GitHub's: a project, an actor (user:<id> or
	// github:<id>), the job's name with its matrix values.
	vars["FORGECI_REPOSITORY"], vars["FORGECI_ACTOR"], vars["FORGECI_JOB"] = f.Repository, f.Actor, j.claim.Job.Name
	return vars
}
