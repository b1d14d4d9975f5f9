package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// Why a job stops before its steps end: the cause of its context. Lease
// loss is client.ErrLeaseLost, set by whichever call learns it.
var (
	ErrCanceled       = errors.New("canceled")
	ErrTimedOut       = errors.New("timed out")
	ErrRunnerStopping = errors.New("runner stopping")
	// errSuperseded: the control plane granted a later generation of the
	// job, so this attempt's lease had ended.
	errSuperseded = errors.New("the control plane granted a later generation of the job")
)

// job is one job being run.
type job struct {
	a     *Agent
	claim *protocol.Claim
	lease *client.Lease
	box   *isolate.Box
	ws    string
	// outputs counts the steps' output pipes still being copied.
	outputs sync.WaitGroup
	logs    *logAppender
	// ctx is the steps' and transfers' context: done when the lease ends,
	// the job times out, or it is stopped; context.Cause says which.
	ctx  context.Context
	stop context.CancelCauseFunc
	// idTokenEnv tells the steps of a job that may ask for identity
	// tokens where to ask (empty for any other job).
	idTokenEnv map[string]string
	// stepEnv and stepPath are what the steps so far set with
	// $FORGECI_ENV and added with $FORGECI_PATH (newest first).
	stepEnv  map[string]string
	stepPath []string
	// maskRefused: a step's ::add-mask:: was refused (commandFilter).
	maskRefused atomic.Bool
	// overridden are the runner's variables whose value from the
	// pipeline or a step the log has said is not used.
	overridden map[string]bool
}

// stopped is why the job was stopped, or nil while it runs.
func (j *job) stopped() error {
	if j.ctx.Err() == nil {
		return nil
	}
	return context.Cause(j.ctx)
}

// newJob holds the claim's lease and gives the job its context: it ends
// with the lease, at the job's timeout, or by stop. It returns nil if an
// attempt of the job still here is of this generation or a later one, or
// of another run (a bad or hostile server's answer): nothing of that one
// is to be touched or reported.
//
// A later generation is taken: the control plane granted it only once the
// earlier lease had ended (a retry claimed by another slot the moment the
// earlier attempt completed, before its clean-up; or a lease that expired
// while this runner was stopped). An earlier attempt whose lease had not
// ended is lost, and goes on to its clean-up alone. Every attempt stays
// in the runner's list until its own clean-up, so that a claim of its
// lease again is refused meanwhile.
func (a *Agent) newJob(c *protocol.Claim) (*job, func()) {
	h := a.cfg.Client.Hold(c.Lease)
	timed, cancelTimeout := context.WithTimeoutCause(h.Context(), time.Duration(c.Job.TimeoutSeconds)*time.Second, ErrTimedOut)
	ctx, stop := context.WithCancelCause(timed)
	j := &job{a: a, claim: c, lease: h, ctx: ctx, stop: stop}
	j.logs = newLogAppender(h, redactions(a.cfg.Client.Token, c))
	id := c.Lease.JobID
	a.mu.Lock()
	for _, earlier := range a.running[id] {
		if t := earlier.Tuple(); t.Generation >= c.Lease.Generation || t.RunID != c.Lease.RunID {
			a.mu.Unlock()
			stop(nil)
			cancelTimeout()
			return nil, func() {}
		}
	}
	for _, earlier := range a.running[id] {
		earlier.Lose(fmt.Errorf("%w: generation %d", errSuperseded, c.Lease.Generation)) // nothing if it had ended
	}
	a.running[id] = append(a.running[id], h)
	a.mu.Unlock()
	return j, func() {
		stop(nil)
		cancelTimeout()
		a.mu.Lock()
		if rest := slices.DeleteFunc(a.running[id], func(o *client.Lease) bool { return o == h }); len(rest) > 0 {
			a.running[id] = rest
		} else {
			delete(a.running, id)
		}
		a.mu.Unlock()
	}
}

// redactions are the values masked in the log: the runner's token, the
// claim's secrets and the values substituted for ${{ secrets.NAME }}, and
// env values whose names look secret.
func redactions(token string, c *protocol.Claim) []string {
	redact := []string{token}
	for _, v := range c.Secrets {
		redact = append(redact, v)
	}
	redact = append(redact, c.Mask...)
	for k, v := range c.Job.Env {
		if looksSecret(k) {
			redact = append(redact, v)
		}
	}
	return redact
}

func (a *Agent) runJob(c *protocol.Claim, slot int) (slotOK bool) {
	l := c.Lease
	// The whole tuple is logged: it is no credential without the runner's
	// token, and it is what an operator matches against the server's.
	log := a.cfg.Log.With("job", c.Job.Name, "run_id", l.RunID, "job_id", l.JobID, "generation", l.Generation,
		"lease_id", l.LeaseID, "runner_id", l.RunnerID)
	log.Info("claimed")
	j, done := a.newJob(c)
	defer done()
	if j == nil {
		log.Error("claim refused: this generation of the job, a later one or another run's job of its ID is on this runner")
		return true
	}
	go j.logs.loop()
	guard := j.guardLease()
	hbStop, endHeartbeats := context.WithCancel(context.Background())
	hbEnded := make(chan struct{})
	go func() {
		defer close(hbEnded)
		j.heartbeat(hbStop, guard)
	}()
	// Returns once no heartbeat is in flight.
	stopHeartbeats := sync.OnceFunc(func() { endHeartbeats(); <-hbEnded })
	outcome, exitCode := j.execute(slot)
	j.endProcesses(log)
	defer func() { slotOK = j.cleanUp(log) }()
	// The lease is kept while the log's last batches go (the heartbeats
	// stop before the completion, which ends it), and its end by the
	// runner's clock holds until the report returns: both are lease side
	// effects.
	j.report(log, outcome, exitCode, stopHeartbeats)
	stopHeartbeats()
	guard.stop()
	return slotOK // set by cleanUp, deferred
}

// report flushes the log and reports the outcome, unless the lease ended
// (lost, or abandoned by a stopping runner): then nothing more is said.
// stopHeartbeats is called before the completion.
func (j *job) report(log *slog.Logger, outcome domain.Outcome, exitCode int, stopHeartbeats func()) {
	cause := j.stopped()
	if j.lease.Ended() {
		log.Warn("job stopped without reporting", "reason", context.Cause(j.lease.Context()))
		return
	}
	why := ""
	switch {
	case errors.Is(cause, ErrCanceled):
		outcome = domain.OutcomeCanceled
		fmt.Fprintf(j.logs, "\n==> job canceled\n")
	case errors.Is(cause, ErrTimedOut):
		outcome, why = domain.OutcomeFailed, "timeout"
		fmt.Fprintf(j.logs, "\n==> job timed out after %d minutes\n", j.claim.Job.TimeoutSeconds/60)
	}
	if hit := j.limitHit(); outcome == domain.OutcomeFailed && hit != "" {
		why = hit
		fmt.Fprintf(j.logs, "==> %s\n", hit)
	}
	// The report outlives the job's cancel or timeout, not its lease.
	ctx, cancel := context.WithTimeout(j.lease.Context(), 30*time.Second)
	defer cancel()
	if err := j.logs.Close(ctx); err != nil {
		if j.lease.Lost() {
			log.Warn("lease lost while flushing logs")
			return
		}
		// Refused (413 at the log cap) or given up: the job still reports.
		log.Warn("the log was not all sent", "err", err)
	}
	stopHeartbeats() // none races the completion, which ends the lease
	if err := j.lease.Complete(ctx, outcome, exitCode, why); err != nil {
		if errors.Is(context.Cause(j.lease.Context()), errSuperseded) {
			// Its lease had ended, by this completion or by expiry.
			log.Info("the completion's answer was not awaited: a later generation of the job was claimed", "outcome", outcome)
			return
		}
		log.Warn("complete failed", "err", err)
		return
	}
	log.Info("completed", "outcome", outcome, "exit_code", exitCode)
}

// endProcesses kills whatever the job's steps left running and waits
// (briefly: a runner without cgroups cannot kill what escaped its process
// groups) for their last output to reach the log.
func (j *job) endProcesses(log *slog.Logger) {
	if j.box != nil {
		if err := j.box.Kill(); err != nil {
			log.Error("the job's processes could not be killed", "err", err)
		}
	}
	done := make(chan struct{})
	go func() {
		j.outputs.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

func (j *job) limitHit() string {
	if j.box == nil {
		return ""
	}
	return j.box.LimitHit()
}

// heartbeat extends the lease every third of its TTL. It stops the job on
// cancel_requested; a 409 ends the lease (the client does that). The
// lease holds until the send time of the last heartbeat that succeeded
// plus the TTL, less LeaseMargin (the server's clock counts from when it
// got the request, later): a timer gives it up as lost then, since the
// control plane may already have given the job to someone else, and no
// heartbeat call outlasts it.
// Ending stop ends it, and the call in flight with it.
func (j *job) heartbeat(stop context.Context, guard *leaseGuard) {
	ttl, margin := guard.ttl, LeaseMargin(guard.ttl)
	deadline := guard.deadline
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-stop.Done():
				return
			case <-j.ctx.Done():
				// A cancel or a timeout: the kill and the report have what
				// is left of the lease (a step stuck in the kernel must
				// not hold it past the job's timeout).
				return
			case <-t.C:
			}
		}
		sent := time.Now()
		hctx, cancel := context.WithDeadline(j.lease.Context(), deadline)
		unlink := context.AfterFunc(stop, cancel)
		cancelRequested, err := j.lease.Heartbeat(hctx)
		unlink()
		cancel()
		if err != nil {
			continue
		}
		deadline = sent.Add(ttl - margin)
		guard.extend(deadline)
		if cancelRequested {
			j.stop(ErrCanceled)
		}
	}
}

// leaseGuard gives the lease up as lost at its end by the runner's clock
// (heartbeat), until stopped once the job has reported.
type leaseGuard struct {
	ttl      time.Duration
	deadline time.Time // the first
	mu       sync.Mutex
	timer    *time.Timer
	stopped  bool
}

// guardLease starts the job's lease guard. The claim (a long poll) was
// answered just now, its lease granted a moment before: the margin covers
// that until the first heartbeat, sent at once, gives a send time to
// count from.
func (j *job) guardLease() *leaseGuard {
	ttl := time.Duration(j.claim.LeaseTTLSeconds) * time.Second
	if ttl <= 0 {
		ttl = 60 * time.Second
	}
	g := &leaseGuard{ttl: ttl, deadline: time.Now().Add(ttl - LeaseMargin(ttl))}
	g.timer = time.AfterFunc(time.Until(g.deadline), func() {
		j.lease.Lose(fmt.Errorf("no heartbeat succeeded within the %s lease", ttl))
	})
	return g
}

// extend moves the lease's end to deadline, unless it came already (Stop
// fails once the timer fired: the lease is lost for good) or the guard
// was stopped.
func (g *leaseGuard) extend(deadline time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopped && g.timer.Stop() {
		g.timer.Reset(time.Until(deadline))
	}
}

func (g *leaseGuard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	g.timer.Stop()
}

// LeaseMargin is how long before the lease's end by the runner's clock
// it is given up: a twentieth of the TTL, at least half a second.
func LeaseMargin(ttl time.Duration) time.Duration {
	return max(ttl/20, 500*time.Millisecond)
}

// execute prepares the workspace and runs the steps; it returns the
// outcome to report and the exit code of the last step run.
func (j *job) execute(slot int) (domain.Outcome, int) {
	fail := func(format string, args ...any) (domain.Outcome, int) {
		fmt.Fprintf(j.logs, "==> "+format+"\n", args...)
		return domain.OutcomeFailed, -1
	}
	if err := j.prepare(slot); err != nil {
		if j.stopped() != nil {
			return domain.OutcomeFailed, -1
		}
		return fail("%v", err)
	}
	if j.claim.Job.IDToken {
		closeSocket, err := j.startIDTokens(slot)
		if err != nil {
			return fail("identity tokens cannot be served, no step was run: %v", err)
		}
		defer closeSocket()
	}
	seq := j.runSteps()
	if len(j.claim.Job.Outputs) > 0 && j.stopped() == nil {
		if err := j.sendOutputs(seq); err != nil {
			if j.stopped() != nil {
				return domain.OutcomeFailed, seq.exit
			}
			return fail("the job's outputs: %v", err)
		}
	}
	j.sendReports()
	if seq.failed {
		return domain.OutcomeFailed, seq.exit
	}
	return j.publish(seq.exit)
}

// sendOutputs evaluates the job's outputs mapping and sends the values,
// whatever the steps' outcome (a failed job's outputs are what its steps
// set, as GitHub's).
func (j *job) sendOutputs(seq *sequence) error {
	outputs, err := j.jobOutputs(seq)
	if err != nil {
		return err
	}
	for _, name := range dropSecretOutputs(outputs, j.logs.maskSet()) {
		fmt.Fprintf(j.logs, "==> output %s is not passed on: it holds a secret (a job that needs the secret names it itself)\n", name)
	}
	if err := (&protocol.OutputsRequest{Outputs: outputs}).Validate(); err != nil {
		return err
	}
	// Only strings: Marshal cannot fail.
	if body, _ := json.Marshal(outputs); len(body) > protocol.MaxOutputsBody-4096 {
		return fmt.Errorf("the outputs are %d bytes once written as JSON, over the %d a request may carry", len(body), protocol.MaxOutputsBody-4096)
	}
	if err := j.lease.SetOutputs(j.ctx, outputs); err != nil {
		return err
	}
	fmt.Fprintf(j.logs, "==> job outputs set: %s\n", strings.Join(slices.Sorted(maps.Keys(outputs)), ", "))
	return nil
}

// publish uploads the artifacts and saves the cache of a job whose steps
// passed.
func (j *job) publish(exit int) (domain.Outcome, int) {
	c := j.claim
	// Nothing the steps started may still be changing the workspace while
	// the runner reads it for artifacts and caches.
	if err := j.box.Kill(); err != nil {
		fmt.Fprintf(j.logs, "==> the job's processes could not be stopped: %v\n", err)
		return domain.OutcomeFailed, -1
	}
	for _, art := range c.Job.Artifacts {
		if err := j.uploadArtifact(art); err != nil {
			if j.stopped() == nil {
				fmt.Fprintf(j.logs, "==> artifact %s could not be uploaded: %v\n", art.Name, err)
				return domain.OutcomeFailed, -1
			}
			return domain.OutcomeFailed, exit
		}
		fmt.Fprintf(j.logs, "==> artifact %s uploaded\n", art.Name)
	}
	if c.Job.Cache != nil {
		if err := j.saveCache(); err != nil && j.stopped() == nil {
			fmt.Fprintf(j.logs, "==> cache not saved: %v\n", err)
		}
	}
	return domain.OutcomePassed, 0
}

func looksSecret(name string) bool {
	n := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
