package ui

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// The run pages' markup (render.go says how values are escaped).

var runTriggers = []string{"github:push", "github:pull_request", "schedule", "dispatch", "cli", "retry"}

func runsHTML(o *out, p runsPage) {
	top(o, p.page)
	o.raw("<h1>Runs")
	if p.Project != "" {
		o.raw(" of ")
		o.text(p.Project)
	}
	o.raw("</h1>\n")
	o.raw(`<p class="projects">Projects: <a href="/">all</a>`)
	for _, pr := range p.Projects {
		o.raw(` · <a href="/?project=`)
		o.query(pr.Name)
		o.raw(`">`)
		o.text(pr.Name)
		o.raw(`</a> `)
		o.state(pr.LastState)
	}
	o.ifRaw(p.MoreProjects, ` · <a href="/projects">more…</a>`)
	o.raw("</p>\n")
	runFilters(o, p)
	o.raw(`<table class="runs"><thead><tr><th>Run</th><th>State</th><th>Trigger</th><th>Commit</th><th>Source</th><th>Started</th><th>Duration</th></tr></thead><tbody>
`)
	for _, r := range p.Runs {
		o.raw("<tr><td>")
		runLink(o, r.ID, r.Project, r.Number)
		if r.RunName != "" {
			o.raw(`<br><span class="run-name">`)
			o.text(r.RunName)
			o.raw("</span>")
		}
		o.raw("</td><td>")
		o.state(r.State)
		o.raw("</td>\n<td>")
		o.text(r.Trigger)
		o.raw("</td><td><code>")
		o.text(shortID(r.GitSHA))
		o.raw("</code>")
		o.ifRaw(r.GitDirty, " (dirty)")
		o.raw(" ")
		o.text(r.GitRef)
		o.raw(`</td>
<td><code title="`)
		o.text(r.SourceDigest)
		o.raw(`">`)
		o.text(shortID(r.SourceDigest))
		o.raw("</code></td><td>")
		o.text(when(r.CreatedAt))
		o.raw("</td><td>")
		o.text(duration(r.StartedAt, r.FinishedAt))
		o.raw("</td></tr>\n")
	}
	if len(p.Runs) == 0 {
		o.raw(`<tr><td colspan="7">No runs yet.</td></tr>`)
	}
	o.raw("</tbody></table>\n")
	if p.NextURL != "" {
		o.raw(`<p><a id="older-runs" href="`)
		o.href(string(p.NextURL))
		o.raw(`">Older runs</a></p>`)
	}
	bottom(o)
}

func runFilters(o *out, p runsPage) {
	o.raw(`<form method="get" action="/" class="filters" id="run-filters">`)
	if p.Project != "" {
		o.raw(`<input type="hidden" name="project" value="`)
		o.text(p.Project)
		o.raw(`">`)
	}
	o.raw(`
<label>Branch <input name="branch" id="filter-branch" value="`)
	o.text(p.Filter.Branch)
	o.raw(`" placeholder="main"></label>
<label>State <select name="state" id="filter-state"><option value="">any</option>`)
	options(o, p.States, p.Filter.State)
	o.raw(`</select></label>
<label>Trigger <select name="trigger" id="filter-trigger"><option value="">any</option>`)
	options(o, runTriggers, p.Filter.Trigger)
	o.raw(`</select></label>
<button id="filter-runs">Filter</button></form>
`)
}

// options writes <option>s of values, the one equal to selected selected.
func options(o *out, values []string, selected string) {
	for _, v := range values {
		o.raw("<option")
		o.ifRaw(v == selected, " selected")
		o.raw(">")
		o.text(v)
		o.raw("</option>")
	}
}

func runHTML(o *out, p runPage) {
	r := p.Run
	top(o, p.page)
	o.raw("<h1>")
	o.text(r.Project)
	o.raw(" #")
	o.num(r.Number)
	o.raw(` <span class="state `)
	o.text(r.State)
	o.raw(`" id="run-state" data-terminal="`)
	o.raw(fmt.Sprint(p.Terminal))
	o.raw(`">`)
	o.text(r.State)
	o.raw("</span></h1>\n")
	if r.RunName != "" {
		o.raw(`<p class="run-name" id="run-name">`)
		o.text(r.RunName)
		o.raw("</p>\n")
	}
	runFacts(o, r)
	if p.CanDecide {
		o.raw(`<p class="approval">This run is for a first-time contributor: nothing runs until a writer approves it.</p>
<form method="post" action="`)
		runHref(o, r.ID)
		o.raw(`/approve" class="inline"><button id="approve-run">Approve and run</button></form>
<form method="post" action="`)
		runHref(o, r.ID)
		o.raw(`/reject" class="inline"><button id="reject-run">Reject</button></form>`)
	}
	if p.CanWrite {
		o.raw(`<form method="post" action="`)
		runHref(o, r.ID)
		if p.Terminal {
			o.raw(`/retry"><button id="retry-run">Retry run</button></form>`)
		} else {
			o.raw(`/cancel"><button id="cancel-run">Cancel run</button></form>`)
		}
	}
	o.raw(`<h2>Jobs</h2><div class="graph">`)
	for _, stage := range p.Stages {
		o.raw(`<div class="stage">`)
		for _, j := range stage {
			jobCard(o, r.ID, j)
		}
		o.raw("</div>")
	}
	o.raw("</div>\n")
	runArtifacts(o, r.ID, p.Artifacts)
	bottom(o)
}

func runFacts(o *out, r store.Run) {
	o.raw(`<dl class="facts"><dt>Trigger</dt><dd>`)
	o.text(r.Trigger)
	o.raw(`</dd>
<dt>Commit</dt><dd><code>`)
	o.text(r.GitSHA)
	o.raw("</code> ")
	o.text(r.GitRef)
	o.ifRaw(r.GitDirty, " (dirty work tree)")
	o.raw(`</dd>
<dt>Source blob</dt><dd><code>`)
	o.text(r.SourceDigest)
	o.raw(`</code></dd><dt>Manifest</dt><dd><code>`)
	o.text(r.ManifestDigest)
	o.raw(`</code></dd>
<dt>Trust</dt><dd id="run-trust">`)
	if r.Trusted {
		o.raw("trusted (secrets allowed)")
	} else {
		o.raw("untrusted (no secrets; caches of its own scope)")
	}
	o.raw(" · cache scope <code>")
	o.text(r.Scope)
	o.raw("</code></dd>\n")
	if r.Approval != "none" {
		o.raw(`<dt>Approval</dt><dd id="run-approval">`)
		if r.Approval == "pending" {
			o.raw(`<span class="state PENDING">waiting for approval</span>`)
		} else {
			o.text(r.Approval)
			o.raw(" by ")
			o.text(r.ApprovalBy)
			if r.ApprovalAt != nil {
				o.raw(" at ")
				o.text(when(*r.ApprovalAt))
			}
		}
		o.raw("</dd>")
	}
	if len(r.Inputs) > 0 {
		o.raw(`<dt>Inputs</dt><dd id="run-inputs">`)
		runInputs(o, r.Inputs)
		o.raw("</dd>")
	}
	o.raw(`
<dt>Created</dt><dd>`)
	o.text(when(r.CreatedAt))
	o.raw(`</dd><dt>Duration</dt><dd>`)
	o.text(duration(r.StartedAt, r.FinishedAt))
	o.raw("</dd></dl>\n")
}

func jobCard(o *out, runID string, j store.JobInfo) {
	o.raw(`
<a class="job `)
	o.text(j.State)
	o.raw(`" href="`)
	jobHref(o, runID, j.ID)
	o.raw(`" id="job-`)
	o.text(j.Name)
	o.raw(`"><strong>`)
	o.text(j.Name)
	o.raw("</strong>")
	o.state(j.State)
	o.raw("\n")
	if len(j.Needs) > 0 {
		o.raw("<small>needs ")
		o.text(join(j.Needs))
		o.raw("</small>")
	}
	if j.Generation > 1 {
		o.raw("<small>attempt ")
		o.num(int64(j.Generation))
		o.raw("</small>")
	}
	if t := j.Tests; t != nil {
		o.raw(`<small class="tests">`)
		o.num(int64(t.Passed))
		o.raw(" passed")
		if t.Failed != 0 {
			o.raw(", ")
			o.num(int64(t.Failed))
			o.raw(" failed")
		}
		if t.Errored != 0 {
			o.raw(", ")
			o.num(int64(t.Errored))
			o.raw(" errored")
		}
		o.raw("</small>")
	}
	o.raw("</a>")
}

func runArtifacts(o *out, runID string, as []store.ArtifactInfo) {
	if len(as) == 0 {
		return
	}
	o.raw(`<h2>Artifacts</h2><table class="artifacts" id="artifacts"><thead><tr><th>Job</th><th>Name</th><th>Size</th><th>Digest</th><th>Expires</th></tr></thead><tbody>
`)
	for _, a := range as {
		o.raw("<tr><td>")
		o.text(a.Job)
		o.raw(`</td><td><a href="`)
		jobHref(o, runID, a.JobID)
		o.raw(`/artifacts/`)
		o.seg(a.Name)
		o.raw(`" id="artifact-`)
		o.text(a.Job)
		o.raw("-")
		o.text(a.Name)
		o.raw(`" download>`)
		o.text(a.Name)
		o.raw("</a></td>\n<td>")
		o.text(humanBytes(a.Size))
		o.raw(`</td><td><code title="`)
		o.text(a.Digest)
		o.raw(`">`)
		o.text(shortID(a.Digest))
		o.raw("</code></td><td>")
		if a.ExpiresAt != nil {
			o.text(when(*a.ExpiresAt))
		} else {
			o.raw("with its run")
		}
		o.raw("</td></tr>\n")
	}
	o.raw("</tbody></table>")
}

func jobHTML(o *out, p jobPage) {
	r, j := p.Run, p.Job
	top(o, p.page)
	o.raw("<p>")
	runLink(o, r.ID, r.Project, r.Number)
	o.raw("</p>\n<h1>")
	o.text(j.Name)
	o.raw(` <span class="state `)
	o.text(j.State)
	o.raw(`" id="job-state">`)
	o.text(j.State)
	o.raw("</span></h1>\n")
	if !p.JobTerminal && p.CanWrite {
		o.raw(`<form method="post" action="`)
		jobHref(o, r.ID, j.ID)
		o.raw(`/cancel"><button id="cancel-job">Cancel job</button></form>`)
	}
	if j.Environment != "" {
		jobDeployment(o, p)
	}
	jobAttempts(o, p)
	if p.DurationChart != "" {
		o.raw("<h2>Duration over its last runs</h2>")
		o.raw(string(p.DurationChart)) // SVG built by durationChart, its text escaped
	}
	if p.Report != nil {
		jobReport(o, p)
	}
	o.raw("\n<h2>Log")
	if p.Generation != 0 {
		o.raw(" of attempt ")
		o.num(int64(p.Generation))
	}
	gen := fmt.Sprint(p.Generation)
	o.raw(`</h2>
<div class="log-tools"><label><input type="checkbox" id="log-times"> Timestamps (UTC)</label>
<input type="search" id="log-find" placeholder="Find in log" aria-label="Find in log"> <span id="log-found"></span>
<a id="log-raw" href="`)
	jobHref(o, r.ID, j.ID)
	o.raw(`/raw?generation=`, gen, `">Raw log</a></div>
<div id="log" class="log" data-url="`)
	jobHref(o, r.ID, j.ID)
	o.raw(`/log" data-steps="`)
	jobHref(o, r.ID, j.ID)
	o.raw(`/steps" data-generation="`, gen, `"></div>
`)
	bottom(o)
}

func jobDeployment(o *out, p jobPage) {
	r, j := p.Run, p.Job
	o.raw(`<p>Deploys to <a id="job-environment" href="/projects/`)
	o.seg(r.ProjectID)
	o.raw(`/environments/`)
	o.seg(j.Environment)
	o.raw(`">`)
	o.text(j.Environment)
	o.raw("</a>")
	o.ifRaw(j.DeployState == "waiting", `: <strong id="deploy-waiting">waiting for a review</strong>`)
	o.raw("</p>\n")
	if j.DeployState != "waiting" || !p.CanWrite || j.State != "PENDING" {
		return
	}
	o.raw(`<p id="deploy-what">Commit <code>`)
	o.text(shortID(r.GitSHA))
	o.raw("</code> of <code>")
	o.text(cmp.Or(r.GitRef, "no ref"))
	o.raw("</code>, started by ")
	o.text(r.Trigger)
	o.ifRaw(r.GitDirty, ", <strong>from a checkout with uncommitted changes</strong>")
	if len(r.Inputs) > 0 {
		// A manual run's inputs reach its steps' scripts: what is deployed
		// is the commit and these.
		o.raw(`, <strong>with the inputs</strong> <span id="deploy-inputs">`)
		runInputs(o, r.Inputs)
		o.raw("</span>")
	}
	o.raw(`.</p>
<form method="post" class="review" id="deploy-review"><label>Comment <input name="comment" id="deploy-comment" maxlength="1000"></label>
<button id="deploy-approve" formaction="`)
	jobHref(o, r.ID, j.ID)
	o.raw(`/deployment/approve">Approve deployment</button>
<button id="deploy-reject" formaction="`)
	jobHref(o, r.ID, j.ID)
	o.raw(`/deployment/reject">Reject</button></form>`)
}

// runInputs shows a manual run's inputs by name, each value as
// domain.ShowInput quotes it (what is not printable escaped), as it is:
// no spaces folded, long values wrapped.
func runInputs(o *out, in map[string]any) {
	for i, name := range slices.Sorted(maps.Keys(in)) {
		if i > 0 {
			o.raw(", ")
		}
		o.text(name)
		o.raw(` <code class="input">`)
		o.text(domain.ShowInput(in[name]))
		o.raw("</code>")
	}
}

func jobAttempts(o *out, p jobPage) {
	o.raw(`<h2>Attempts</h2><table class="attempts"><thead><tr><th>Generation</th><th>Runner</th><th>Outcome</th><th>Reason</th><th>Exit code</th><th>Started</th><th>Ended</th><th>Log</th></tr></thead><tbody>
`)
	for _, a := range p.Job.Attempts {
		o.raw("<tr><td>")
		o.num(int64(a.Generation))
		o.raw("</td><td>")
		o.text(a.RunnerName)
		o.raw("</td><td>")
		o.state(a.Outcome)
		o.raw("</td><td>")
		o.text(a.Reason)
		o.raw("</td>\n<td>")
		if a.ExitCode != nil {
			o.num(int64(*a.ExitCode))
		}
		o.raw("</td><td>")
		o.text(when(a.StartedAt))
		o.raw("</td><td>")
		if a.EndedAt != nil {
			o.text(when(*a.EndedAt))
		}
		o.raw("</td>\n<td><a href=\"")
		jobHref(o, p.Run.ID, p.Job.ID)
		o.raw("?generation=")
		o.num(int64(a.Generation))
		o.raw(`">`)
		o.num(a.LogSize)
		o.raw(" bytes</a></td></tr>\n")
	}
	if len(p.Job.Attempts) == 0 {
		o.raw(`<tr><td colspan="8">Not started yet.</td></tr>`)
	}
	o.raw("</tbody></table>\n")
}

func jobReport(o *out, p jobPage) {
	t := p.Report
	o.raw(`<h2>Tests</h2><p id="tests-summary">`)
	o.raw(fmt.Sprintf("%d passed, %d failed, %d errored, %d skipped <small>(%d tests in %d report files, %.1fs)</small></p>\n",
		t.Passed, t.Failed, t.Errored, t.Skipped, t.Tests, t.Files, t.Seconds))
	if len(t.Failures) == 0 {
		return
	}
	o.raw(`<table class="failures" id="test-failures"><thead><tr><th>Test</th><th>Where</th><th>Message</th></tr></thead><tbody>
`)
	for _, f := range t.Failures {
		o.raw("<tr><td>")
		if f.Class != "" {
			o.text(f.Class)
			o.raw(".")
		}
		o.text(f.Name)
		o.raw(` <span class="state FAILED">`)
		o.text(f.Kind)
		o.raw("</span></td><td>")
		o.text(f.File)
		if f.Line != 0 {
			o.raw(":")
			o.num(int64(f.Line))
		}
		o.raw(`</td><td><pre class="message">`)
		o.text(f.Message)
		o.raw("</pre></td></tr>\n")
	}
	o.raw("</tbody></table>")
	o.ifRaw(t.Truncated, "<p>More failures than are kept: the report files are the artifact <code>test-reports</code>.</p>")
}
