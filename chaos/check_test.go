package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// The checker is what makes a chaos run a proof, so it must be able to
// fail: these tests give it one small, correct history, and then the same
// history with one thing broken at a time, and expect it to say so.

const sec = int64(time.Second)

// history is one run with one job: claimed by runner R1 at 1 s (lease L1
// until 5 s), extended at 3 s (until 9 s), a log append at 2 s, passed at
// 4 s; a late heartbeat at 6 s refused; a sweep at 10 s.
func history() ([]Op, *Dump) {
	lease := &domain.Lease{RunID: "run1", JobID: "J1", RunnerID: "R1", LeaseID: "L1", Generation: 1}
	log := "chaos J1 1 L1 step 1/2\nchaos J1 1 L1 step 2/2\n"
	zero := int64(0)
	ops := []Op{
		{Kind: "request", T: 1 * sec, Received: 1 * sec, Runner: "R1", Route: "claim", Status: 200, Claimed: lease, Delivered: true},
		{Kind: "request", T: 2 * sec, Received: 2 * sec, Runner: "R1", Route: "logs", Job: "J1", Lease: lease, Status: 200,
			Offset: &zero, Len: len(log), SHA: sha(log)},
		{Kind: "request", T: 4 * sec, Received: 4 * sec, Runner: "R1", Route: "complete", Job: "J1", Lease: lease, Status: 200, Outcome: "passed"},
		{Kind: "request", T: 6 * sec, Received: 6 * sec, Runner: "R1", Route: "heartbeat", Job: "J1", Lease: lease, Status: 409},
		{Kind: "sweep", T: 10 * sec, Start: 10 * sec, End: 10*sec + sec/10, OK: true},
	}
	d := &Dump{
		LeaseTTL: 4 * time.Second, SweepEvery: time.Second,
		Runs:      []DumpRun{{ID: "run1", State: "PASSED"}},
		Jobs:      []DumpJob{{ID: "J1", RunID: "run1", Name: "build", State: "PASSED", Generation: 1}},
		Attempts:  []DumpAttempt{{JobID: "J1", RunnerID: "R1", LeaseID: "L1", Outcome: "PASSED", Generation: 1, LogSize: int64(len(log))}},
		Logs:      []DumpLog{{JobID: "J1", Generation: 1, Chunks: [][2]int64{{0, int64(len(log))}}, Data: log}},
		Artifacts: []DumpBlob{{JobID: "J1", Name: "dist", Digest: "sha256:a", Generation: 1, Stamp: "J1 1 L1"}},
		Audit: []DumpAudit{
			{Seq: 1, At: 1 * sec, Expires: 5 * sec, Kind: "job", JobID: "J1", OldState: "QUEUED", NewState: "RUNNING", LeaseID: "L1", RunnerID: "R1", Detail: "claim", Generation: 1, OK: true},
			{Seq: 2, At: 2 * sec, Expires: 5 * sec, Kind: "chunk", JobID: "J1", NewState: "RUNNING", LeaseID: "L1", RunnerID: "R1", Generation: 1, OK: true},
			{Seq: 3, At: 3 * sec, Expires: 9 * sec, Kind: "job", JobID: "J1", OldState: "RUNNING", NewState: "RUNNING", LeaseID: "L1", RunnerID: "R1", Detail: "extend", Generation: 1, OK: true},
			{Seq: 4, At: 4 * sec, Expires: 9 * sec, Kind: "attempt", JobID: "J1", NewState: "PASSED", LeaseID: "L1", RunnerID: "R1", Generation: 1, OK: true},
			{Seq: 5, At: 4 * sec, Expires: 9 * sec, Kind: "job", JobID: "J1", OldState: "RUNNING", NewState: "PASSED", LeaseID: "L1", RunnerID: "R1", Generation: 1, OK: true},
		},
	}
	return ops, d
}

func TestCheckCleanHistory(t *testing.T) {
	ops, d := history()
	r := Check(ops, d)
	if !r.OK() {
		t.Fatalf("violations in a correct history:\n%s", r)
	}
	if r.StaleAttempted != 1 || r.StaleRejected != 1 || r.AckLogAppends != 1 || r.AckCompletions != 1 || r.JobStates["PASSED"] != 1 {
		t.Fatalf("counts: %s", r)
	}
}

func TestCheckFindsViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(ops []Op, d *Dump) []Op
		want   string
	}{
		{"a late heartbeat accepted", func(ops []Op, d *Dump) []Op {
			ops[3].Status = 200
			return ops
		}, "accepted after the lease had ended"},
		{"a write accepted with another lease ID", func(ops []Op, d *Dump) []Op {
			l := *ops[1].Lease
			l.LeaseID = "L2"
			ops[1].Lease = &l
			return ops
		}, "not the one granted"},
		{"a write accepted from another runner's token", func(ops []Op, d *Dump) []Op {
			ops[1].Runner = "R2"
			return ops
		}, "not the one granted"},
		{"a claim answer the database never granted", func(ops []Op, d *Dump) []Op {
			l := *ops[0].Claimed
			l.LeaseID = "L3"
			ops[0].Claimed = &l
			return ops
		}, "did not grant"},
		{"acknowledged log bytes lost", func(ops []Op, d *Dump) []Op {
			d.Logs[0].Data = d.Logs[0].Data[:10]
			return ops
		}, "acknowledged log bytes"},
		{"acknowledged completion not recorded", func(ops []Op, d *Dump) []Op {
			d.Attempts[0].Outcome = "FAILED"
			d.Jobs[0].State = "FAILED"
			return ops
		}, "acknowledged completion"},
		{"acknowledged artifact missing", func(ops []Op, d *Dump) []Op {
			lease := ops[1].Lease
			return append(ops, Op{Kind: "request", T: 3 * sec, Received: 3 * sec, Runner: "R1", Route: "artifacts/commit", Job: "J1",
				Lease: lease, Status: 201, Name: "other", Digest: "sha256:b"})
		}, "acknowledged artifact"},
		{"an artifact with another attempt's bytes", func(ops []Op, d *Dump) []Op {
			d.Artifacts[0].Stamp = "J1 0 L0"
			return ops
		}, "not its own attempt's stamp"},
		{"a write the database judged outside the lease", func(ops []Op, d *Dump) []Op {
			d.Audit[1].OK = false
			return ops
		}, "was not under the current unexpired lease"},
		{"a job left RUNNING", func(ops []Op, d *Dump) []Op {
			d.Jobs[0].State = "RUNNING"
			d.Audit = d.Audit[:4]
			return ops
		}, "still RUNNING"},
		{"a job ended twice", func(ops []Op, d *Dump) []Op {
			d.Audit = append(d.Audit, DumpAudit{Seq: 6, At: 11 * sec, Kind: "job", JobID: "J1", OldState: "RUNNING", NewState: "ABORTED", Generation: 1, OK: true})
			return ops
		}, "entered a terminal state 2 times"},
		{"a job RUNNING past its lease and the next sweep", func(ops []Op, d *Dump) []Op {
			ops = ops[:2] // no completion, no late heartbeat: the runner went silent
			ops = append(ops, Op{Kind: "sweep", T: 10 * sec, Start: 10 * sec, End: 10*sec + sec/10, OK: true})
			d.Audit = d.Audit[:3]
			d.Audit = append(d.Audit, DumpAudit{Seq: 4, At: 20 * sec, Kind: "job", JobID: "J1", OldState: "RUNNING", NewState: "ABORTED", Generation: 1, OK: true})
			d.Attempts[0].Outcome, d.Jobs[0].State = "ABORTED", "ABORTED"
			return ops
		}, "the job left RUNNING at"},
		{"another attempt's output in the log", func(ops []Op, d *Dump) []Op {
			d.Logs[0].Data = "chaos J1 1 L1 step 1/2\nchaos J1 2 L9 step 1/2\nchaos J1 1 L1 step 2/2\n"
			return ops
		}, "holds another attempt's line"},
		{"a lost line in a passed attempt's log", func(ops []Op, d *Dump) []Op {
			d.Logs[0].Data = "chaos J1 1 L1 step 2/2\n"
			return ops
		}, "lost, doubled or reordered"},
		{"a log with a hole", func(ops []Op, d *Dump) []Op {
			d.Logs[0].Chunks = [][2]int64{{0, 10}, {12, int64(len(d.Logs[0].Data)) - 12}}
			return ops
		}, "not contiguous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, d := history()
			r := Check(tc.mutate(ops, d), d)
			found := false
			for _, v := range r.Violations {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Fatalf("want a violation saying %q; got:\n%s", tc.want, r)
			}
		})
	}
}

// TestCheckLeaseLossCauses: an abandoned lease is put down to the fault
// that explains it. A runner killed while its claim long-polled explains a
// lease granted after the kill: the server, like a Lambda never told that
// its client left, went on and granted it to a process that was gone. A
// heartbeat sent or answered after the runner's own end of the lease is
// load; a runner that stops sending them is not explained.
func TestCheckLeaseLossCauses(t *testing.T) {
	// abandoned: claimed at 1 s (asked at askedAt), never heard from
	// again, aborted by the sweep at 5.2 s.
	abandoned := func(askedAt int64, faults ...Op) *Report {
		ops, d := history()
		ops = ops[:1]
		ops[0].Received = askedAt
		ops = append(ops, faults...)
		ops = append(ops, Op{Kind: "sweep", T: 5*sec + sec/10, Start: 5*sec + sec/10, End: 5*sec + sec/5, OK: true})
		d.Audit = append(d.Audit[:1], DumpAudit{Seq: 2, At: 5*sec + sec/10 + sec/20, Kind: "job", JobID: "J1",
			OldState: "RUNNING", NewState: "ABORTED", LeaseID: "L1", RunnerID: "R1", Generation: 1, OK: true})
		d.Attempts[0].Outcome, d.Jobs[0].State, d.Runs[0].State = "ABORTED", "ABORTED", "FAILED"
		d.Attempts[0].LogSize, d.Logs, d.Artifacts = 0, nil, nil
		r := Check(ops, d)
		if !r.OK() {
			t.Fatalf("violations:\n%s", r)
		}
		return r
	}
	killed := func(runner string, from, to int64) Op {
		return Op{Kind: "fault", Fault: "sigkill", Target: runner, T: from, End: to}
	}
	beat := func(received, answered int64) Op {
		lease := &domain.Lease{RunID: "run1", JobID: "J1", RunnerID: "R1", LeaseID: "L1", Generation: 1}
		return Op{Kind: "request", T: received, Received: received, Answered: answered, Runner: "R1", Route: "heartbeat",
			Job: "J1", Lease: lease, Status: 200}
	}
	refused := func(op Op) Op { op.Status = 409; return op }
	replayed := func(op Op) Op { op.Replay = true; return op }
	for _, tc := range []struct {
		name string
		r    *Report
		want string
	}{
		{"nothing explains it", abandoned(sec / 2), "unexplained"},
		{"killed while its claim was pending", abandoned(sec/5, killed("R1", sec/2, sec*7/10)), "runner sigkill"},
		{"killed while it held the lease", abandoned(sec, killed("R1", 2*sec, 2*sec+sec/5)), "runner sigkill"},
		{"another runner killed while the claim was pending", abandoned(sec/5, killed("R2", sec/2, sec*7/10)), "unexplained"},
		{"killed before it asked", abandoned(sec*8/10, killed("R1", sec/5, sec*3/10)), "unexplained"},
		// The runner's own end of the lease: 3.5 s (4 s less its margin)
		// after the grant at 1 s, then after each heartbeat that succeeded.
		{"a heartbeat answered after the runner's end", abandoned(sec/2, beat(2*sec, 4*sec+sec*6/10)), heartbeatAnsweredLate},
		{"a heartbeat sent after it", abandoned(sec/2, beat(4*sec+sec*6/10, 4*sec+sec*7/10)), heartbeatSentLate},
		{"heartbeats on time, then none", abandoned(sec/2, beat(2*sec, 2*sec+sec/10), beat(3*sec, 3*sec+sec/10)), "unexplained"},
		{"a heartbeat refused late but while the lease held", abandoned(sec/2, refused(beat(2*sec, 4*sec+sec*6/10))), "unexplained"},
		{"a heartbeat never answered", abandoned(sec/2, beat(2*sec, 0)), "unexplained"},
		// The harness's replay of a heartbeat after the lease ended is
		// judged (refused: stale) but explains nothing.
		{"a replayed heartbeat after the end", abandoned(sec/2, replayed(refused(beat(6*sec, 6*sec+sec/10)))), "unexplained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.r.LeaseLosses[tc.want] != 1 || len(tc.r.LeaseLosses) != 1 {
				t.Fatalf("lease losses %v, want one %q", tc.r.LeaseLosses, tc.want)
			}
			// A loss no fault explains comes with its timeline.
			injected := !strings.Contains(tc.want, "(load)") && tc.want != "unexplained"
			if got := len(tc.r.LossTimelines); got != map[bool]int{true: 0, false: 1}[injected] ||
				!injected && !strings.HasPrefix(tc.r.LossTimelines[0], tc.want+": job J1 generation 1 on runner R1") {
				t.Fatalf("timelines %q", tc.r.LossTimelines)
			}
		})
	}
	r := abandoned(sec/2, beat(2*sec, 2*sec+sec/10), beat(3*sec, 0))
	if want := "heartbeats: +1.00s-+1.10s ok +2.00s (no answer); expiries:"; len(r.LossTimelines) != 1 ||
		!strings.Contains(r.LossTimelines[0], want) || !strings.Contains(r.String(), r.LossTimelines[0]) {
		t.Fatalf("timeline %q, want %q in it, and in the report", r.LossTimelines, want)
	}
}
