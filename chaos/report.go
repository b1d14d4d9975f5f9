package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Report is what the checker found: counts, and every violation.
type Report struct {
	Config string
	// ClockOffset is the database's clock minus the harness's.
	ClockOffset time.Duration

	Runs, Jobs, Attempts int
	JobStates            map[string]int
	AttemptOutcomes      map[string]int

	// Faults counts the harness's faults by kind; ProxyFaults the proxies'
	// by fault kind and route.
	Faults         map[string]int
	ProxyFaults    map[string]map[string]int
	StopsPastLease int
	Backends       int // database sessions terminated

	Requests int
	// ServerErrors counts 5xx answers by route (expected while the
	// database is restarting or a session was terminated).
	ServerErrors map[string]int
	// Stale requests: they reached the control plane carrying a lease that
	// was provably no longer current when they arrived (ended, expired,
	// superseded or never granted). Rejected: answered 409 or 401. Failed:
	// answered otherwise but not accepted (a 5xx while the database was
	// down). An accepted one is a violation.
	StaleByRoute                  map[string]int
	StaleAttempted, StaleRejected int
	StaleFailed                   int
	// Replayed counts the heartbeats the harness sent again once every
	// job had ended (each a stale request).
	Replayed int

	// Acknowledged writes checked against the final state.
	AckLogAppends, AckArtifacts, AckCaches, AckCompletions int
	LogBytesChecked                                        int64

	// LeaseLosses counts ABORTED attempts by the fault that explains them;
	// LossTimelines describe those no injected fault explains.
	LeaseLosses   map[string]int
	LossTimelines []string
	// InfraFailures counts attempts that failed because the runner could
	// not move a blob (source, artifact, cache): faults should cost retries,
	// not failed jobs.
	InfraFailures int

	Violations []string
}

// OK reports whether no invariant was violated.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// LoadLosses counts the leases lost to a heartbeat sent or answered late
// with no fault to explain it (heartbeats.go).
func (r *Report) LoadLosses() int {
	return r.LeaseLosses[heartbeatSentLate] + r.LeaseLosses[heartbeatAnsweredLate]
}

func (r *Report) String() string {
	var b strings.Builder
	kv := func(m map[string]int) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(&b, "chaos run: %s\n", r.Config)
	if r.ClockOffset > time.Second || r.ClockOffset < -time.Second {
		fmt.Fprintf(&b, "  the database's clock was %s off the runners' and the control plane's\n", r.ClockOffset.Round(time.Second))
	}
	fmt.Fprintf(&b, "  runs %d, jobs %d (%s), attempts %d (%s)\n", r.Runs, r.Jobs, kv(r.JobStates), r.Attempts, kv(r.AttemptOutcomes))
	fmt.Fprintf(&b, "  faults injected: %s; database sessions terminated %d; SIGSTOPs past the lease %d\n",
		kv(r.Faults), r.Backends, r.StopsPastLease)
	kinds := make([]string, 0, len(r.ProxyFaults))
	for k := range r.ProxyFaults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  proxy %s: %s\n", k, kv(r.ProxyFaults[k]))
	}
	fmt.Fprintf(&b, "  5xx answers: %s\n", kv(r.ServerErrors))
	fmt.Fprintf(&b, "  runner requests %d; stale requests attempted %d (%d of them replayed), rejected %d (409/401), failed otherwise %d, accepted %d [%s]\n",
		r.Requests, r.StaleAttempted, r.Replayed, r.StaleRejected, r.StaleFailed,
		r.StaleAttempted-r.StaleRejected-r.StaleFailed, kv(r.StaleByRoute))
	fmt.Fprintf(&b, "  acknowledged and found intact: %d log appends (%d bytes), %d artifacts, %d cache saves, %d completions\n",
		r.AckLogAppends, r.LogBytesChecked, r.AckArtifacts, r.AckCaches, r.AckCompletions)
	fmt.Fprintf(&b, "  leases lost (ABORTED attempts) by cause: %s; attempts failed by a transfer: %d\n", kv(r.LeaseLosses), r.InfraFailures)
	for _, l := range r.LossTimelines {
		fmt.Fprintf(&b, "    - %s\n", l)
	}
	fmt.Fprintf(&b, "  violations: %d\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 50 {
			fmt.Fprintf(&b, "    ... and %d more\n", len(r.Violations)-50)
			break
		}
		fmt.Fprintf(&b, "    - %s\n", v)
	}
	return b.String()
}
