package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/forgeci/forgeci/runner/agent"
)

// Load is a cause of a lost lease the faults did not make: on two cores
// shared with other tests, a runner's heartbeat can be sent, or answered,
// after the end the runner itself gives its lease (agent.LeaseMargin
// before the TTL from its last heartbeat that succeeded). Such a loss is
// told apart from one nothing explains (a runner that stopped sending
// heartbeats at all) by the heartbeats the proxy saw.
const (
	heartbeatSentLate     = "heartbeat sent late (load)"
	heartbeatAnsweredLate = "heartbeat answered late (load)"
)

// heartbeatOp is one heartbeat of a lease as the proxy saw it, on the
// database's clock (answered 0: no answer came).
type heartbeatOp struct {
	received, answered int64
	ok                 bool
}

func (ck *checker) addHeartbeat(op Op) {
	k := attemptKey{op.Lease.JobID, op.Lease.Generation}
	hb := heartbeatOp{received: ck.db(op.Received), ok: op.Status == 200}
	if op.Answered != 0 {
		hb.answered = ck.db(op.Answered)
	}
	ck.heartbeats[k] = append(ck.heartbeats[k], hb)
}

// lateHeartbeat says whether lease k, granted at grantedAt, had a
// heartbeat sent, or answered, after the runner's own end of the lease
// ("" if none was: the runner kept time, or sent none). A heartbeat not
// answered, or refused before the lease's expiry, is not load: the loss
// stays unexplained.
func (ck *checker) lateHeartbeat(k attemptKey, grantedAt int64) string {
	ttl := ck.d.LeaseTTL
	hold := int64(ttl - agent.LeaseMargin(ttl))
	hbs := ck.heartbeats[k]
	sort.Slice(hbs, func(i, j int) bool { return hbs[i].received < hbs[j].received })
	end := grantedAt + hold
	for _, hb := range hbs {
		switch {
		case hb.received > end:
			return heartbeatSentLate
		case hb.answered == 0:
			return "" // no answer: nothing shows the server was only slow
		case !hb.ok && hb.answered <= ck.expiresAt(k, hb.received):
			return "" // refused while the lease held: a fault of the server's, not load
		case hb.answered > end:
			return heartbeatAnsweredLate
		case hb.ok:
			end = hb.received + hold
		}
	}
	return ""
}

// lossTimeline describes a lease lost to load or to nothing the checker
// knows, so that a failed run's report says what happened without its
// logs: when the lease was granted, each heartbeat the proxy saw (sent
// and answered, after the grant, and its status), each expiry the
// database recorded, and the runner's own end of the lease.
func (ck *checker) lossTimeline(k attemptKey, runner, cause string) string {
	g := ck.grants[k].at
	rel := func(t int64) string { return fmt.Sprintf("+%.2fs", time.Duration(t-g).Seconds()) }
	var b strings.Builder
	fmt.Fprintf(&b, "%s: job %s generation %d on runner %s, granted at %s (db clock); heartbeats:",
		cause, k.job, k.gen, runner, clock(g))
	hbs := ck.heartbeats[k]
	sort.Slice(hbs, func(i, j int) bool { return hbs[i].received < hbs[j].received })
	for _, hb := range hbs {
		switch {
		case hb.answered == 0:
			fmt.Fprintf(&b, " %s (no answer)", rel(hb.received))
		case hb.ok:
			fmt.Fprintf(&b, " %s-%s ok", rel(hb.received), rel(hb.answered))
		default:
			fmt.Fprintf(&b, " %s-%s refused", rel(hb.received), rel(hb.answered))
		}
	}
	if len(hbs) == 0 {
		b.WriteString(" none")
	}
	b.WriteString("; expiries:")
	for _, x := range ck.expiries[k] {
		fmt.Fprintf(&b, " at %s until %s", rel(x.at), rel(x.until))
	}
	if e, ok := ck.ends[k]; ok {
		fmt.Fprintf(&b, "; ended %s", rel(e))
	}
	fmt.Fprintf(&b, "; the runner's own end %s after its last heartbeat that succeeded",
		ck.d.LeaseTTL-agent.LeaseMargin(ck.d.LeaseTTL))
	return b.String()
}
