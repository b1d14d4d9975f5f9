package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
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
	ck := newChecker(d)
	ck.readAudit()
	ck.checkTerminal()
	ck.readOps(ops)
	ck.checkArtifacts()
	ck.checkSweeps()
	ck.explainLosses()
	ck.checkLogs()
	return ck.r
}

// checkRequest judges one runner request against the audit and the dump.
func (ck *checker) checkRequest(op Op) {
	if strings.HasPrefix(op.Route, "s3 ") {
		return
	}
	ck.r.Requests++
	if op.Status >= 500 {
		ck.r.ServerErrors[op.Route]++
	}
	if op.Route == "claim" && op.Claimed != nil {
		k := attemptKey{op.Claimed.JobID, op.Claimed.Generation}
		if g, found := ck.grants[k]; !found || g.lease != op.Claimed.LeaseID || g.runner != op.Claimed.RunnerID || g.runner != op.Runner {
			ck.bad("a claim answered %s with lease %s for runner %s, which the database did not grant to it", k, op.Claimed.LeaseID, op.Runner)
		}
	}
	if op.Lease == nil || op.Status == 0 {
		return
	}
	if ck.judgeLease(op) {
		ck.checkAcknowledged(op, attemptKey{op.Lease.JobID, op.Lease.Generation})
	}
}

// judgeLease: a request accepted only with the lease as granted, and one
// that arrived after its lease ended or expired was refused. It reports
// whether the request was accepted.
func (ck *checker) judgeLease(op Op) bool {
	ok := op.Status >= 200 && op.Status < 300
	l := *op.Lease
	k := attemptKey{l.JobID, l.Generation}
	g, granted := ck.grants[k]
	current := granted && g.lease == l.LeaseID && g.runner == l.RunnerID && g.runner == op.Runner && l.JobID == op.Job
	recv := ck.db(op.Received)
	stale := !current
	if end, ended := ck.ends[k]; ended && end+margin < recv {
		stale = true
	}
	if e := ck.expiresAt(k, recv); e != 0 && e+margin < recv {
		stale = true
	}
	if ok && !current {
		ck.bad("%s %s accepted with a lease that is not the one granted (%+v)", op.Route, k, l)
	}
	if stale {
		ck.r.StaleAttempted++
		ck.r.StaleByRoute[op.Route]++
		switch {
		case ok:
			ck.bad("%s for %s accepted after the lease had ended or expired (received %s)", op.Route, k, clock(recv))
		case op.Status == http.StatusConflict || op.Status == http.StatusUnauthorized:
			ck.r.StaleRejected++
		default:
			ck.r.StaleFailed++
		}
	}
	return ok
}

// checkAcknowledged: what the control plane acknowledged is in the dump.
func (ck *checker) checkAcknowledged(op Op, k attemptKey) {
	switch op.Route {
	case "logs":
		if op.Offset == nil || op.Len == 0 {
			return
		}
		data := ck.logs[k].Data
		end := *op.Offset + int64(op.Len)
		if end > int64(len(data)) || sha(data[*op.Offset:end]) != op.SHA {
			ck.bad("acknowledged log bytes [%d, %d) of %s are not in its log", *op.Offset, end, k)
			return
		}
		ck.r.AckLogAppends++
		ck.r.LogBytesChecked += int64(op.Len)
	case "artifacts/commit":
		if !holds(ck.d.Artifacts, k, op.Name, op.Digest) {
			ck.bad("acknowledged artifact %s (%s) of %s is missing", op.Name, op.Digest, k)
			return
		}
		ck.r.AckArtifacts++
	case "cache/commit":
		if !holds(ck.d.Pending, k, op.Key, op.Digest) {
			ck.bad("acknowledged cache save %s (%s) of %s is missing", op.Key, op.Digest, k)
			return
		}
		ck.r.AckCaches++
	case "complete":
		ck.completed[k]++
		if ck.completed[k] > 1 {
			ck.bad("%s was completed twice", k)
		}
		a, found := ck.attempts[k]
		if !found || a.Outcome != strings.ToUpper(op.Outcome) || a.LeaseID != op.Lease.LeaseID {
			ck.bad("acknowledged completion %q of %s is not what the attempt records (%q)", op.Outcome, k, a.Outcome)
			return
		}
		ck.r.AckCompletions++
	}
}

// holds reports whether blobs has name with digest from attempt k.
func holds(blobs []DumpBlob, k attemptKey, name, digest string) bool {
	for _, b := range blobs {
		if b.JobID == k.job && b.Generation == k.gen && b.Name == name && b.Digest == digest {
			return true
		}
	}
	return false
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
