package pipeline

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
)

// Triggers are a pipeline's on:, as GitHub's: which GitHub deliveries
// make a run. A pipeline without on: is run for every push and pull
// request, as before; forgeci submit is an explicit request and always
// runs.
type Triggers struct {
	Push        *PushTrigger
	PullRequest *PullRequestTrigger
	// Dispatch is on.workflow_dispatch (nil: the pipeline is not run by
	// hand).
	Dispatch *Dispatch
	// Schedules are on.schedule.
	Schedules []domain.Schedule
}

// PushTrigger is on.push.
type PushTrigger struct {
	branches, tags, paths refFilter
}

// PullRequestTrigger is on.pull_request: its branches are the base's.
type PullRequestTrigger struct {
	branches, paths refFilter
	types           []string
}

// refFilter is one of GitHub's filter pairs (branches / branches-ignore):
// set when either was given; ignore when it was the -ignore one.
type refFilter struct {
	set, ignore bool
	f           filter
}

// accepts reports whether name passes the filter (an unset one passes
// everything).
func (r refFilter) accepts(name string) bool {
	if !r.set {
		return true
	}
	return r.f.matches(name) != r.ignore
}

// PullRequestTypes are the pull request activities ForgeCI runs for, and
// defaultTypes GitHub's default.
var (
	PullRequestTypes = []string{"opened", "synchronize", "reopened", "edited", "closed", "ready_for_review",
		"labeled", "unlabeled", "assigned", "unassigned", "review_requested", "review_request_removed",
		"converted_to_draft", "locked", "unlocked", "auto_merge_enabled", "auto_merge_disabled"}
	defaultTypes = []string{"opened", "synchronize", "reopened"}
)

// triggers reads on: an event name, a list of them, or a mapping of each
// to its filters.
func (p *parseState) triggers(n ast.Node, path string) *Triggers {
	t := &Triggers{}
	events := map[string]ast.Node{}
	switch v := unwrap(n).(type) {
	case *ast.StringNode:
		events[v.Value] = nil
	case *ast.SequenceNode:
		for _, e := range v.Values {
			if s, ok := p.str(e, path); ok {
				events[s] = nil
			}
		}
	default:
		kvs, ok := p.mapping(n, path)
		if !ok {
			return nil
		}
		for _, kv := range kvs {
			events[keyOf(kv)] = kv.Value
		}
	}
	for event, v := range events {
		ep := path + "." + event
		at := v
		if at == nil {
			at = n
		}
		switch event {
		case "push":
			t.Push = p.pushTrigger(v, ep)
		case "pull_request":
			t.PullRequest = p.pullRequestTrigger(v, ep)
		case "workflow_dispatch":
			t.Dispatch = p.dispatchTrigger(v, ep)
		case "schedule":
			if v == nil {
				p.errorf(at, ep, "schedule needs its entries: schedule: [{cron: '0 3 * * *'}]")
			} else {
				t.Schedules = p.schedules(v, ep)
			}
		default:
			p.errorf(at, ep, "event %q is not supported (ForgeCI runs on push, pull_request, schedule and workflow_dispatch; forgeci submit runs at once)", event)
		}
	}
	return t
}

// options reads an event's mapping (null: no filters) by key.
func (p *parseState) options(v ast.Node, path, expected string, read map[string]func(ast.Node, string)) {
	if v == nil {
		return
	}
	if _, null := unwrap(v).(*ast.NullNode); null {
		return
	}
	kvs, ok := p.mapping(v, path)
	if ok {
		p.keys(kvs, path, expected, read)
	}
}

func (p *parseState) pushTrigger(v ast.Node, path string) *PushTrigger {
	t := &PushTrigger{}
	p.options(v, path, "branches, branches-ignore, tags, tags-ignore, paths or paths-ignore", map[string]func(ast.Node, string){
		"branches":        p.refFilter(&t.branches, false),
		"branches-ignore": p.refFilter(&t.branches, true),
		"tags":            p.refFilter(&t.tags, false),
		"tags-ignore":     p.refFilter(&t.tags, true),
		"paths":           p.refFilter(&t.paths, false),
		"paths-ignore":    p.refFilter(&t.paths, true),
	})
	return t
}

func (p *parseState) pullRequestTrigger(v ast.Node, path string) *PullRequestTrigger {
	t := &PullRequestTrigger{types: defaultTypes}
	p.options(v, path, "branches, branches-ignore, paths, paths-ignore or types", map[string]func(ast.Node, string){
		"branches":        p.refFilter(&t.branches, false),
		"branches-ignore": p.refFilter(&t.branches, true),
		"paths":           p.refFilter(&t.paths, false),
		"paths-ignore":    p.refFilter(&t.paths, true),
		"types": func(v ast.Node, kp string) {
			if t.types = p.strList(v, kp); len(t.types) == 0 {
				p.errorf(v, kp, "types needs at least one activity")
			}
			for _, ty := range t.types {
				if !contains(PullRequestTypes, ty) {
					p.errorf(v, kp, "unknown pull request activity %q (expected one of %s)", ty, strings.Join(PullRequestTypes, ", "))
				}
			}
		},
	})
	return t
}

// refFilter reads one side of a filter pair into r: a list of patterns;
// the pair's two sides cannot both be given.
func (p *parseState) refFilter(r *refFilter, ignore bool) func(ast.Node, string) {
	return func(v ast.Node, kp string) {
		if r.set {
			p.errorf(v, kp, "a filter and its -ignore cannot both be given: write ! patterns in the filter instead")
			return
		}
		patterns := p.strList(v, kp)
		f, err := compileFilter(patterns)
		if err != nil {
			p.errorf(v, kp, "%v", err)
			return
		}
		*r = refFilter{set: true, ignore: ignore, f: f}
	}
}

// RunsOnPush reports whether a push of ref (refs/heads/NAME or refs/tags/NAME)
// that changed the paths changed() returns makes a run, and if not, why.
// changed is called only when a paths filter needs it.
func (t *Triggers) RunsOnPush(ref string, changed func() ([]string, error)) (bool, string, error) {
	if t == nil {
		return true, "", nil
	}
	pt := t.Push
	if pt == nil {
		return false, "the pipeline's on: has no push", nil
	}
	if name, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		// Tags run only when tags are filtered or nothing is.
		if !pt.tags.set && pt.branches.set {
			return false, "on.push filters branches only, and " + ref + " is a tag", nil
		}
		if !pt.tags.accepts(name) {
			return false, "tag " + name + " is not in on.push's tags", nil
		}
		// Path filters are not evaluated for tags, as GitHub's.
		return true, "", nil
	}
	name, ok := strings.CutPrefix(ref, "refs/heads/")
	if !ok {
		return false, ref + " is neither a branch nor a tag", nil
	}
	if !pt.branches.set && pt.tags.set {
		return false, "on.push filters tags only, and " + ref + " is a branch", nil
	}
	if !pt.branches.accepts(name) {
		return false, "branch " + name + " is not in on.push's branches", nil
	}
	return pathsMatch(pt.paths, "on.push", changed)
}

// RunsOnPullRequest reports whether a pull request's activity (action) against
// base branch baseRef makes a run, and if not, why.
func (t *Triggers) RunsOnPullRequest(action, baseRef string, changed func() ([]string, error)) (bool, string, error) {
	if t == nil {
		if contains(defaultTypes, action) {
			return true, "", nil
		}
		return false, "pull request " + action, nil
	}
	pt := t.PullRequest
	switch {
	case pt == nil:
		return false, "the pipeline's on: has no pull_request", nil
	case !contains(pt.types, action):
		return false, "pull request " + action + " is not in on.pull_request's types", nil
	}
	base := strings.TrimPrefix(baseRef, "refs/heads/")
	if !pt.branches.accepts(base) {
		return false, "base branch " + base + " is not in on.pull_request's branches", nil
	}
	return pathsMatch(pt.paths, "on.pull_request", changed)
}

// ErrPathsUnknown is what a changed-paths function returns when the paths
// cannot be known (a force push, histories with nothing in common): then a
// paths filter takes the delivery, as GitHub's does.
var ErrPathsUnknown = errors.New("the changed paths cannot be known")

// pathsMatch applies a paths filter: paths runs when a changed path is in
// it; paths-ignore runs unless every changed path is in it.
func pathsMatch(r refFilter, where string, changed func() ([]string, error)) (bool, string, error) {
	if !r.set {
		return true, "", nil
	}
	files, err := changed()
	if errors.Is(err, ErrPathsUnknown) {
		return true, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("changed paths for %s: %w", where, err)
	}
	for _, f := range files {
		if r.f.matches(f) != r.ignore {
			return true, "", nil
		}
	}
	if r.ignore {
		return false, fmt.Sprintf("no changed path (of %d) is outside %s's paths-ignore", len(files), where), nil
	}
	return false, fmt.Sprintf("no changed path (of %d) is in %s's paths", len(files), where), nil
}
