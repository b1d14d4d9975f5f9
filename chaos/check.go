package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

type attemptKey struct {
	job string
	gen int
}

func (k attemptKey) String() string { return fmt.Sprintf("job %s generation %d", k.job, k.gen) }

type grant struct {
	lease, runner string
	at            int64
}

var terminal = map[string]bool{"PASSED": true, "FAILED": true, "CANCELED": true, "ABORTED": true, "SKIPPED": true}

// margin absorbs the distance between the proxy's and the database's
// clocks and timestamps (a statement's time is taken before it commits).
const margin = int64(5 * time.Millisecond)

// Check proves, from the operation log and the final dump, that:
//
//  1. every job reached exactly one terminal state, and a job ended by its
//     runner ended in the state of its last attempt;
//  2. no write was accepted from a lease that was not current: inside the
//     database every log chunk, artifact, staged cache, lease extension and
//     attempt end was made while the job was RUNNING at that generation and
//     unexpired (the audit triggers judge each in its transaction); an
//     attempt was ABORTED only once expired; every request the control
//     plane accepted carried the exact tuple it granted; every request that
//     arrived with a lease already ended, expired or never granted was
//     refused;
//  3. no acknowledged write was lost: every accepted log append's bytes
//     are in that attempt's log at that offset, every committed artifact
//     and staged cache is there with its digest (the artifact's blob in S3
//     hashing to it), every accepted completion is the attempt's outcome;
//  4. no job stayed RUNNING past its lease plus one sweep: the first sweep
//     that ran to the end after a lease's last expiry had ended it;
//  5. each attempt's log holds only that attempt's output, in order and
//     contiguous, all of it for a passed attempt, and each artifact holds
//     its own attempt's stamp; a dependant saw its need's passing attempt.
func Check(ops []Op, d *Dump) *Report {
	r := &Report{JobStates: map[string]int{}, AttemptOutcomes: map[string]int{}, Faults: map[string]int{},
		ProxyFaults: map[string]map[string]int{}, StaleByRoute: map[string]int{}, LeaseLosses: map[string]int{},
		ServerErrors: map[string]int{}}
	bad := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	db := func(t int64) int64 { return t + d.ClockOffset }
	r.ClockOffset = time.Duration(d.ClockOffset)

	jobs := map[string]DumpJob{}
	for _, j := range d.Jobs {
		jobs[j.ID] = j
		r.JobStates[j.State]++
	}
	r.Runs, r.Jobs, r.Attempts = len(d.Runs), len(d.Jobs), len(d.Attempts)
	attempts := map[attemptKey]DumpAttempt{}
	for _, a := range d.Attempts {
		attempts[attemptKey{a.JobID, a.Generation}] = a
		r.AttemptOutcomes[a.Outcome]++
	}
	logs := map[attemptKey]DumpLog{}
	for _, l := range d.Logs {
		logs[attemptKey{l.JobID, l.Generation}] = l
	}

	// The audit: grants, ends, expiries, transitions; and its own verdicts.
	grants := map[attemptKey]grant{}
	ends := map[attemptKey]int64{}
	type expiry struct{ at, until int64 }
	expiries := map[attemptKey][]expiry{}
	terminalEntries := map[string]int{}
	lastFromRunning := map[string]bool{}
	for _, a := range d.Audit {
		k := attemptKey{a.JobID, a.Generation}
		if !a.OK {
			bad("database: %s write for %s was not under the current unexpired lease (%s; job %s)", a.Kind, k, a.Detail, a.NewState)
		}
		if a.Kind != "job" {
			continue
		}
		if a.Detail == "claim" {
			if _, dup := grants[k]; dup {
				bad("%s was granted twice", k)
			}
			grants[k] = grant{lease: a.LeaseID, runner: a.RunnerID, at: a.At}
		}
		if a.NewState == "RUNNING" {
			expiries[k] = append(expiries[k], expiry{a.At, a.Expires})
		}
		if a.OldState == "RUNNING" && a.NewState != "RUNNING" {
			if _, ok := ends[k]; !ok {
				ends[k] = a.At
			}
		}
		if terminal[a.NewState] && !terminal[a.OldState] {
			terminalEntries[a.JobID]++
			lastFromRunning[a.JobID] = a.OldState == "RUNNING"
		}
	}
	expiresAt := func(k attemptKey, t int64) int64 { // the lease's expiry as of t (0: not granted by then)
		var e int64
		for _, x := range expiries[k] {
			if x.at <= t {
				e = x.until
			}
		}
		return e
	}

	// 1. Exactly one terminal state.
	for _, j := range d.Jobs {
		switch {
		case !terminal[j.State]:
			bad("job %s (%s of run %s) is still %s at the end", j.ID, j.Name, j.RunID, j.State)
		case terminalEntries[j.ID] != 1:
			bad("job %s (%s) entered a terminal state %d times", j.ID, j.Name, terminalEntries[j.ID])
		case lastFromRunning[j.ID]:
			if a, ok := attempts[attemptKey{j.ID, j.Generation}]; !ok || a.Outcome != j.State {
				bad("job %s (%s) is %s but its last attempt (generation %d) records %q", j.ID, j.Name, j.State, j.Generation, a.Outcome)
			}
		}
	}

	// The operation log.
	var sweeps []Op
	type window struct {
		kind, target string
		from, to     int64
	}
	var windows []window
	leaseFaults := map[attemptKey]string{} // a request fault that hit the lease
	lostClaims := map[attemptKey]bool{}
	claimAsked := map[attemptKey]int64{} // when the granted claim's request arrived
	completed := map[attemptKey]int{}
	for _, op := range ops {
		switch op.Kind {
		case "sweep":
			if op.OK {
				sweeps = append(sweeps, op)
			}
		case "fault":
			r.Faults[op.Fault]++
			end := op.End
			if end == 0 {
				end = op.T
			}
			windows = append(windows, window{op.Fault, op.Target, db(op.T), db(end)})
			if op.Fault == "sigstop" {
				if dur, err := time.ParseDuration(op.Detail); err == nil && dur > d.LeaseTTL {
					r.StopsPastLease++
				}
			}
			if op.Fault == "pg_terminate" {
				n, _ := strconv.Atoi(strings.SplitN(op.Detail, ":", 2)[0])
				r.Backends += n
			}
		case "request":
			checkRequest(r, op, bad, db, grants, ends, expiresAt, attempts, logs, d, completed)
			if op.Fault != "" {
				if r.ProxyFaults[op.Fault] == nil {
					r.ProxyFaults[op.Fault] = map[string]int{}
				}
				r.ProxyFaults[op.Fault][op.Route]++
				if op.Lease != nil {
					leaseFaults[attemptKey{op.Lease.JobID, op.Lease.Generation}] = op.Fault
				}
			}
			if op.Claimed != nil && (op.Fault == "drop_response" || !op.Delivered) {
				lostClaims[attemptKey{op.Claimed.JobID, op.Claimed.Generation}] = true
			}
			if op.Claimed != nil && op.Received != 0 {
				claimAsked[attemptKey{op.Claimed.JobID, op.Claimed.Generation}] = db(op.Received)
			}
		}
	}

	// 3. (rest) Every artifact holds its own attempt's stamp; staged caches
	// of passed attempts were published.
	for _, a := range d.Artifacts {
		k := attemptKey{a.JobID, a.Generation}
		g := grants[k]
		switch want := fmt.Sprintf("%s %d %s", a.JobID, a.Generation, g.lease); {
		case a.BlobErr != "":
			bad("artifact %s of %s: %s", a.Name, k, a.BlobErr)
		case a.Stamp != want:
			bad("artifact %s of %s holds %q, not its own attempt's stamp %q", a.Name, k, a.Stamp, want)
		}
	}
	cached := map[string]bool{}
	for _, c := range d.Caches {
		cached[c.Name] = true
	}
	for _, p := range d.Pending {
		if a, ok := attempts[attemptKey{p.JobID, p.Generation}]; ok && a.Outcome == "PASSED" && !cached[p.Name] {
			bad("cache %s staged by passed %s was not published", p.Name, attemptKey{p.JobID, p.Generation})
		}
	}

	// 4. Nothing RUNNING past its lease plus one sweep.
	sort.Slice(sweeps, func(i, j int) bool { return sweeps[i].Start < sweeps[j].Start })
	for k := range grants {
		ex := expiries[k]
		final := ex[len(ex)-1].until
		end, ended := ends[k]
		if ended && end < final {
			continue // ended by its runner (or cancel) before it expired
		}
		i := sort.Search(len(sweeps), func(i int) bool { return db(sweeps[i].Start) >= final+margin })
		if i == len(sweeps) {
			continue // no complete sweep began after it expired; "still RUNNING" is checked above
		}
		if !ended || end > db(sweeps[i].End)+margin {
			bad("%s: lease expired at %s, the first sweep after it finished at %s, the job left RUNNING at %s",
				k, clock(final), clock(db(sweeps[i].End)), clock(end))
		}
	}

	// Why leases were lost.
	for k, a := range attempts {
		if a.Outcome != "ABORTED" {
			continue
		}
		g := grants[k]
		ex := expiries[k]
		from, to := g.at-margin, ex[len(ex)-1].until
		// A runner killed or stopped while its claim long-polled explains
		// the loss too: the server went on (as a Lambda does, never told
		// that its client left) and granted the lease to a process that
		// was gone or frozen.
		runnerFrom := from
		if asked, ok := claimAsked[k]; ok {
			runnerFrom = min(from, asked-margin)
		}
		// The most direct explanation wins.
		cause := ""
		rank := 99
		explain := func(c string, r int) {
			if r < rank {
				cause, rank = c, r
			}
		}
		if lostClaims[k] {
			explain("claim answer lost", 0)
		}
		for _, w := range windows {
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
		if leaseFaults[k] != "" {
			explain("request "+leaseFaults[k], 2)
		}
		if cause == "" {
			cause = "unexplained"
		}
		r.LeaseLosses[cause]++
	}

	// 5. Each attempt's log: contiguous, only its own lines, in order.
	passedBuild := map[string]attemptKey{} // run -> the build job's passed attempt
	for k, a := range attempts {
		if j := jobs[k.job]; j.Name == "build" && a.Outcome == "PASSED" {
			passedBuild[j.RunID] = k
		}
	}
	for k, l := range logs {
		var next int64
		for _, c := range l.Chunks {
			if c[0] != next {
				bad("log of %s is not contiguous: a chunk starts at %d, the one before ended at %d", k, c[0], next)
				break
			}
			next = c[0] + c[1]
		}
		if a, ok := attempts[k]; ok && a.LogSize != next {
			bad("%s records %d log bytes, its log has %d", k, a.LogSize, next)
		}
		checkLog(k, l.Data, grants[k], attempts[k].Outcome, jobs[k.job], passedBuild, grants, bad)
		if attempts[k].Outcome == "FAILED" && (strings.Contains(l.Data, "==> source could not be verified") ||
			strings.Contains(l.Data, "could not be fetched") || strings.Contains(l.Data, "could not be uploaded")) {
			r.InfraFailures++
		}
	}
	return r
}

// checkRequest judges one runner request against the audit and the dump.
func checkRequest(r *Report, op Op, bad func(string, ...any), db func(int64) int64,
	grants map[attemptKey]grant, ends map[attemptKey]int64, expiresAt func(attemptKey, int64) int64,
	attempts map[attemptKey]DumpAttempt, logs map[attemptKey]DumpLog, d *Dump, completed map[attemptKey]int) {
	if strings.HasPrefix(op.Route, "s3 ") {
		return
	}
	r.Requests++
	if op.Status >= 500 {
		r.ServerErrors[op.Route]++
	}
	ok := op.Status >= 200 && op.Status < 300
	if op.Route == "claim" && op.Claimed != nil {
		k := attemptKey{op.Claimed.JobID, op.Claimed.Generation}
		if g, found := grants[k]; !found || g.lease != op.Claimed.LeaseID || g.runner != op.Claimed.RunnerID || g.runner != op.Runner {
			bad("a claim answered %s with lease %s for runner %s, which the database did not grant to it", k, op.Claimed.LeaseID, op.Runner)
		}
	}
	if op.Lease == nil || op.Status == 0 {
		return
	}
	l := *op.Lease
	k := attemptKey{l.JobID, l.Generation}
	g, granted := grants[k]
	current := granted && g.lease == l.LeaseID && g.runner == l.RunnerID && g.runner == op.Runner && l.JobID == op.Job
	recv := db(op.Received)
	stale := !current
	if end, ended := ends[k]; ended && end+margin < recv {
		stale = true
	}
	if e := expiresAt(k, recv); e != 0 && e+margin < recv {
		stale = true
	}
	if ok && !current {
		bad("%s %s accepted with a lease that is not the one granted (%+v)", op.Route, k, l)
	}
	if stale {
		r.StaleAttempted++
		r.StaleByRoute[op.Route]++
		switch {
		case ok:
			bad("%s for %s accepted after the lease had ended or expired (received %s)", op.Route, k, clock(recv))
		case op.Status == http.StatusConflict || op.Status == http.StatusUnauthorized:
			r.StaleRejected++
		default:
			r.StaleFailed++
		}
	}
	if !ok {
		return
	}
	switch op.Route {
	case "logs":
		if op.Offset == nil || op.Len == 0 {
			return
		}
		data := logs[k].Data
		end := *op.Offset + int64(op.Len)
		if end > int64(len(data)) || sha(data[*op.Offset:end]) != op.SHA {
			bad("acknowledged log bytes [%d, %d) of %s are not in its log", *op.Offset, end, k)
			return
		}
		r.AckLogAppends++
		r.LogBytesChecked += int64(op.Len)
	case "artifacts/commit":
		for _, a := range d.Artifacts {
			if a.JobID == k.job && a.Generation == k.gen && a.Name == op.Name && a.Digest == op.Digest {
				r.AckArtifacts++
				return
			}
		}
		bad("acknowledged artifact %s (%s) of %s is missing", op.Name, op.Digest, k)
	case "cache/commit":
		for _, p := range d.Pending {
			if p.JobID == k.job && p.Generation == k.gen && p.Name == op.Key && p.Digest == op.Digest {
				r.AckCaches++
				return
			}
		}
		bad("acknowledged cache save %s (%s) of %s is missing", op.Key, op.Digest, k)
	case "complete":
		completed[k]++
		if completed[k] > 1 {
			bad("%s was completed twice", k)
		}
		a, found := attempts[k]
		if !found || a.Outcome != strings.ToUpper(op.Outcome) || a.LeaseID != l.LeaseID {
			bad("acknowledged completion %q of %s is not what the attempt records (%q)", op.Outcome, k, a.Outcome)
			return
		}
		r.AckCompletions++
	}
}

// checkLog checks the lines chaos.sh printed into one attempt's log.
func checkLog(k attemptKey, data string, g grant, outcome string, job DumpJob, passedBuild map[string]attemptKey,
	grants map[attemptKey]grant, bad func(string, ...any)) {
	lines := strings.Split(data, "\n")
	lines = lines[:len(lines)-1] // the last is empty, or a line cut short by a killed runner
	seen := map[string][2]int{}  // name -> last i, n
	reported := false
	for _, line := range lines {
		if dep, ok := strings.CutPrefix(line, "chaos-dep build "); ok {
			b, found := passedBuild[job.RunID]
			if want := fmt.Sprintf("%s %d %s", b.job, b.gen, grants[b].lease); !found || dep != want {
				bad("%s fetched the build artifact of %q, not the passing attempt's %q", k, dep, want)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "chaos" {
			continue
		}
		if len(f) != 6 {
			bad("%s has a mangled line %q", k, line)
			continue
		}
		if f[1] != k.job || f[2] != strconv.Itoa(k.gen) || f[3] != g.lease {
			if !reported {
				bad("log of %s (lease %s) holds another attempt's line %q", k, g.lease, line)
				reported = true
			}
			continue
		}
		var i, n int
		if _, err := fmt.Sscanf(f[5], "%d/%d", &i, &n); err != nil {
			bad("%s has a mangled line %q", k, line)
			continue
		}
		if last := seen[f[4]]; i != last[0]+1 {
			bad("log of %s: line %d of %s follows line %d (lost, doubled or reordered output)", k, i, f[4], last[0])
		}
		seen[f[4]] = [2]int{i, n}
	}
	if outcome == "PASSED" {
		if len(seen) == 0 {
			bad("passed %s has none of its output in its log", k)
		}
		for name, s := range seen {
			if s[0] != s[1] {
				bad("passed %s: its log has %d of the %d lines of %s", k, s[0], s[1], name)
			}
		}
	}
}

func clock(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
