package domain

import (
	"slices"
	"strings"
)

// PlannedJob is one job of a run as its pipeline plans it (after matrix
// expansion): what the parser produces (pipeline.Job) and what the store
// takes to create a run (store.NewJob) are this one type, so a parsed
// pipeline becomes a run's rows with no copy and neither package imports
// the other.
type PlannedJob struct {
	Name           string
	Needs          []string
	Labels         []string
	TimeoutSeconds int
	RetryLeaseLost int
	RetryFailed    int
	Spec           JobSpec
	// Group is the job's name in the pipeline file: the same for every
	// combination of a matrix (needs.<group> in expressions).
	Group string
	// If is the job's condition (an expression without ${{ }}), evaluated
	// by the control plane when the job's needs have ended; "" is
	// success().
	If string
	// ContinueOnError: the job's failure does not fail the run, and its
	// dependants see it as a success.
	ContinueOnError bool
	// FailFast: when a combination of the job's matrix fails, the
	// others not yet ended are canceled. MaxParallel (0: no limit) bounds
	// how many of them are queued or running at once.
	FailFast    bool
	MaxParallel int
	// ReadsNeeds: expressions the runner evaluates read needs.*, so the
	// control plane puts the needs context into the spec when it queues
	// the job.
	ReadsNeeds bool
	// Concurrency is the job's concurrency group (nil: none): a template
	// the control plane evaluates when the job's needs have ended (the
	// matrix already filled in).
	Concurrency *Concurrency
}

// NeedCycle is a walk along needs that comes back to a job: Path runs from
// where the walk started to the job met a second time, which is last (a ->
// b -> a); Job is the index of that job.
type NeedCycle struct {
	Job  int
	Path []string
}

// NeedCycles is THE check that jobs' needs form no cycle (the parser and
// the store both ask it). names[i] is job i's name and needs(i) the names
// it needs; a need naming no job is passed over (each caller reports
// those its own way). It walks depth first from each job in order not
// reached before, and returns the first cycle each such walk meets; none
// when the needs are acyclic.
func NeedCycles(names []string, needs func(i int) []string) []NeedCycle {
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	const (
		unseen = iota
		visiting
		done
	)
	mark := make([]int, len(names))
	var found []NeedCycle
	var visit func(i int, path []string) bool
	visit = func(i int, path []string) bool {
		switch mark[i] {
		case visiting:
			found = append(found, NeedCycle{Job: i, Path: append(slices.Clone(path), names[i])})
			return false
		case done:
			return true
		}
		mark[i] = visiting
		ok := true
		for _, n := range needs(i) {
			if up, known := index[n]; known && !visit(up, append(path, names[i])) {
				ok = false
				break
			}
		}
		mark[i] = done
		return ok
	}
	for i := range names {
		if mark[i] == unseen {
			visit(i, nil)
		}
	}
	return found
}

// Schedule is one of a pipeline's on.schedule entries: a five-field cron
// in UTC, and what to do with a slot missed while the control plane was
// down (run-once or skip).
type Schedule struct {
	Cron   string `json:"cron"`
	Missed string `json:"missed"`
}

// branchRE is a branch name as ForgeCI takes one (git's rules, simply:
// no .., //, trailing / or ., or .lock; see ValidBranch).
var branchRE = LazyRegexp(`^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}$`)

// ValidBranch reports whether name is a branch name ForgeCI takes (a
// client's, or one GitHub names).
func ValidBranch(name string) bool {
	return branchRE().MatchString(name) && !strings.Contains(name, "..") && !strings.Contains(name, "//") &&
		!strings.HasSuffix(name, "/") && !strings.HasSuffix(name, ".") && !strings.HasSuffix(name, ".lock")
}
