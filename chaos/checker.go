package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// checker holds what Check reads from the dump and the operation log, and
// the report it fills; each of its methods is one of Check's passes.
type checker struct {
	r *Report
	d *Dump

	jobs     map[string]DumpJob
	attempts map[attemptKey]DumpAttempt
	logs     map[attemptKey]DumpLog

	// From the audit: grants, ends, expiries, terminal transitions.
	grants          map[attemptKey]grant
	ends            map[attemptKey]int64
	expiries        map[attemptKey][]expiry
	terminalEntries map[string]int
	lastFromRunning map[string]bool

	// From the operation log.
	sweeps      []Op
	windows     []window
	leaseFaults map[attemptKey]string // a request fault that hit the lease
	lostClaims  map[attemptKey]bool
	claimAsked  map[attemptKey]int64 // when the granted claim's request arrived
	completed   map[attemptKey]int
	heartbeats  map[attemptKey][]heartbeatOp
}

type expiry struct{ at, until int64 }

// window is when a fault was in effect, on the database's clock.
type window struct {
	kind, target string
	from, to     int64
}

func newChecker(d *Dump) *checker {
	ck := &checker{d: d, r: &Report{JobStates: map[string]int{}, AttemptOutcomes: map[string]int{}, Faults: map[string]int{},
		ProxyFaults: map[string]map[string]int{}, StaleByRoute: map[string]int{}, LeaseLosses: map[string]int{},
		ServerErrors: map[string]int{}},
		jobs: map[string]DumpJob{}, attempts: map[attemptKey]DumpAttempt{}, logs: map[attemptKey]DumpLog{},
		grants: map[attemptKey]grant{}, ends: map[attemptKey]int64{}, expiries: map[attemptKey][]expiry{},
		terminalEntries: map[string]int{}, lastFromRunning: map[string]bool{},
		leaseFaults: map[attemptKey]string{}, lostClaims: map[attemptKey]bool{}, claimAsked: map[attemptKey]int64{},
		completed: map[attemptKey]int{}, heartbeats: map[attemptKey][]heartbeatOp{}}
	ck.r.ClockOffset = time.Duration(d.ClockOffset)
	for _, j := range d.Jobs {
		ck.jobs[j.ID] = j
		ck.r.JobStates[j.State]++
	}
	ck.r.Runs, ck.r.Jobs, ck.r.Attempts = len(d.Runs), len(d.Jobs), len(d.Attempts)
	for _, a := range d.Attempts {
		ck.attempts[attemptKey{a.JobID, a.Generation}] = a
		ck.r.AttemptOutcomes[a.Outcome]++
	}
	for _, l := range d.Logs {
		ck.logs[attemptKey{l.JobID, l.Generation}] = l
	}
	return ck
}

func (ck *checker) bad(format string, args ...any) {
	ck.r.Violations = append(ck.r.Violations, fmt.Sprintf(format, args...))
}

// db moves a harness time onto the database's clock.
func (ck *checker) db(t int64) int64 { return t + ck.d.ClockOffset }

// expiresAt is the lease's expiry as of t (0: not granted by then).
func (ck *checker) expiresAt(k attemptKey, t int64) int64 {
	var e int64
	for _, x := range ck.expiries[k] {
		if x.at <= t {
			e = x.until
		}
	}
	return e
}

// readAudit reads the audit triggers' record: grants, ends, expiries,
// transitions, and their own verdicts.
func (ck *checker) readAudit() {
	for _, a := range ck.d.Audit {
		k := attemptKey{a.JobID, a.Generation}
		if !a.OK {
			ck.bad("database: %s write for %s was not under the current unexpired lease (%s; job %s)", a.Kind, k, a.Detail, a.NewState)
		}
		if a.Kind != "job" {
			continue
		}
		if a.Detail == "claim" {
			if _, dup := ck.grants[k]; dup {
				ck.bad("%s was granted twice", k)
			}
			ck.grants[k] = grant{lease: a.LeaseID, runner: a.RunnerID, at: a.At}
		}
		if a.NewState == "RUNNING" {
			ck.expiries[k] = append(ck.expiries[k], expiry{a.At, a.Expires})
		}
		if a.OldState == "RUNNING" && a.NewState != "RUNNING" {
			if _, ok := ck.ends[k]; !ok {
				ck.ends[k] = a.At
			}
		}
		if terminal[a.NewState] && !terminal[a.OldState] {
			ck.terminalEntries[a.JobID]++
			ck.lastFromRunning[a.JobID] = a.OldState == "RUNNING"
		}
	}
}

// checkTerminal: 1. exactly one terminal state.
func (ck *checker) checkTerminal() {
	for _, j := range ck.d.Jobs {
		switch {
		case !terminal[j.State]:
			ck.bad("job %s (%s of run %s) is still %s at the end", j.ID, j.Name, j.RunID, j.State)
		case ck.terminalEntries[j.ID] != 1:
			ck.bad("job %s (%s) entered a terminal state %d times", j.ID, j.Name, ck.terminalEntries[j.ID])
		case ck.lastFromRunning[j.ID]:
			if a, ok := ck.attempts[attemptKey{j.ID, j.Generation}]; !ok || a.Outcome != j.State {
				ck.bad("job %s (%s) is %s but its last attempt (generation %d) records %q", j.ID, j.Name, j.State, j.Generation, a.Outcome)
			}
		}
	}
}

// readOps reads the operation log, judging each request (checkRequest).
func (ck *checker) readOps(ops []Op) {
	for _, op := range ops {
		switch op.Kind {
		case "sweep":
			if op.OK {
				ck.sweeps = append(ck.sweeps, op)
			}
		case "fault":
			ck.r.Faults[op.Fault]++
			end := op.End
			if end == 0 {
				end = op.T
			}
			ck.windows = append(ck.windows, window{op.Fault, op.Target, ck.db(op.T), ck.db(end)})
			if op.Fault == "sigstop" {
				if dur, err := time.ParseDuration(op.Detail); err == nil && dur > ck.d.LeaseTTL {
					ck.r.StopsPastLease++
				}
			}
			if op.Fault == "pg_terminate" {
				n, _ := strconv.Atoi(strings.SplitN(op.Detail, ":", 2)[0])
				ck.r.Backends += n
			}
		case "request":
			ck.checkRequest(op)
			if op.Replay {
				ck.r.Replayed++ // judged as any request; explains nothing
				break
			}
			if op.Fault != "" {
				if ck.r.ProxyFaults[op.Fault] == nil {
					ck.r.ProxyFaults[op.Fault] = map[string]int{}
				}
				ck.r.ProxyFaults[op.Fault][op.Route]++
				if op.Lease != nil {
					ck.leaseFaults[attemptKey{op.Lease.JobID, op.Lease.Generation}] = op.Fault
				}
			}
			if op.Claimed != nil && (op.Fault == "drop_response" || !op.Delivered) {
				ck.lostClaims[attemptKey{op.Claimed.JobID, op.Claimed.Generation}] = true
			}
			if op.Route == "heartbeat" && op.Lease != nil {
				ck.addHeartbeat(op)
			}
			if op.Claimed != nil && op.Received != 0 {
				ck.claimAsked[attemptKey{op.Claimed.JobID, op.Claimed.Generation}] = ck.db(op.Received)
			}
		}
	}
}

// checkArtifacts: 3. (rest) every artifact holds its own attempt's stamp;
// staged caches of passed attempts were published.
func (ck *checker) checkArtifacts() {
	for _, a := range ck.d.Artifacts {
		k := attemptKey{a.JobID, a.Generation}
		g := ck.grants[k]
		switch want := fmt.Sprintf("%s %d %s", a.JobID, a.Generation, g.lease); {
		case a.BlobErr != "":
			ck.bad("artifact %s of %s: %s", a.Name, k, a.BlobErr)
		case a.Stamp != want:
			ck.bad("artifact %s of %s holds %q, not its own attempt's stamp %q", a.Name, k, a.Stamp, want)
		}
	}
	cached := map[string]bool{}
	for _, c := range ck.d.Caches {
		cached[c.Name] = true
	}
	for _, p := range ck.d.Pending {
		if a, ok := ck.attempts[attemptKey{p.JobID, p.Generation}]; ok && a.Outcome == "PASSED" && !cached[p.Name] {
			ck.bad("cache %s staged by passed %s was not published", p.Name, attemptKey{p.JobID, p.Generation})
		}
	}
}

// checkSweeps: 4. nothing RUNNING past its lease plus one sweep.
func (ck *checker) checkSweeps() {
	sort.Slice(ck.sweeps, func(i, j int) bool { return ck.sweeps[i].Start < ck.sweeps[j].Start })
	for k := range ck.grants {
		ex := ck.expiries[k]
		final := ex[len(ex)-1].until
		end, ended := ck.ends[k]
		if ended && end < final {
			continue // ended by its runner (or cancel) before it expired
		}
		i := sort.Search(len(ck.sweeps), func(i int) bool { return ck.db(ck.sweeps[i].Start) >= final+margin })
		if i == len(ck.sweeps) {
			continue // no complete sweep began after it expired; "still RUNNING" is checked above
		}
		if !ended || end > ck.db(ck.sweeps[i].End)+margin {
			ck.bad("%s: lease expired at %s, the first sweep after it finished at %s, the job left RUNNING at %s",
				k, clock(final), clock(ck.db(ck.sweeps[i].End)), clock(end))
		}
	}
}

// explainLosses says why each lease was lost, the most direct cause first.
func (ck *checker) explainLosses() {
	for k, a := range ck.attempts {
		if a.Outcome != "ABORTED" {
			continue
		}
		g := ck.grants[k]
		ex := ck.expiries[k]
		from, to := g.at-margin, ex[len(ex)-1].until
		// A runner killed or stopped while its claim long-polled explains
		// the loss too: the server went on (as a Lambda does, never told
		// that its client left) and granted the lease to a process that
		// was gone or frozen.
		runnerFrom := from
		if asked, ok := ck.claimAsked[k]; ok {
			runnerFrom = min(from, asked-margin)
		}
		// The most direct explanation wins.
		cause := ""
		rank := 99
		explain := func(why string, rk int) {
			if rk < rank {
				cause, rank = why, rk
			}
		}
		if ck.lostClaims[k] {
			explain("claim answer lost", 0)
		}
		for _, w := range ck.windows {
			if w.to < runnerFrom || w.from > to {
				continue
			}
			switch w.kind {
			case "sigkill", "sigstop":
				if w.target == a.RunnerID {
					explain("runner "+w.kind, 1)
				}
			}
			if w.to < from {
				continue
			}
			switch w.kind {
			case "pg_restart":
				explain("database restart", 3)
			case "pg_terminate":
				explain("database session terminated", 4)
			}
		}
		if ck.leaseFaults[k] != "" {
			explain("request "+ck.leaseFaults[k], 2)
		}
		if why := ck.lateHeartbeat(k, g.at); why != "" {
			explain(why, 5)
		}
		if cause == "" {
			cause = "unexplained"
		}
		ck.r.LeaseLosses[cause]++
		if rank >= 5 {
			ck.r.LossTimelines = append(ck.r.LossTimelines, ck.lossTimeline(k, a.RunnerID, cause))
		}
	}
}

// checkLogs: 5. each attempt's log is contiguous and holds only its own
// lines, in order.
func (ck *checker) checkLogs() {
	passedBuild := map[string]attemptKey{} // run -> the build job's passed attempt
	for k, a := range ck.attempts {
		if j := ck.jobs[k.job]; j.Name == "build" && a.Outcome == "PASSED" {
			passedBuild[j.RunID] = k
		}
	}
	for k, l := range ck.logs {
		var next int64
		for _, c := range l.Chunks {
			if c[0] != next {
				ck.bad("log of %s is not contiguous: a chunk starts at %d, the one before ended at %d", k, c[0], next)
				break
			}
			next = c[0] + c[1]
		}
		if a, ok := ck.attempts[k]; ok && a.LogSize != next {
			ck.bad("%s records %d log bytes, its log has %d", k, a.LogSize, next)
		}
		checkLog(k, l.Data, ck.grants[k], ck.attempts[k].Outcome, ck.jobs[k.job], passedBuild, ck.grants, ck.bad)
		if ck.attempts[k].Outcome == "FAILED" && (strings.Contains(l.Data, "==> source could not be verified") ||
			strings.Contains(l.Data, "could not be fetched") || strings.Contains(l.Data, "could not be uploaded")) {
			ck.r.InfraFailures++
		}
	}
}
