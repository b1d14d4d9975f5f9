package ui

import (
	"cmp"
	"fmt"
	"html"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// The pages are written by Go code, not html/template: html/template calls
// methods by name, which makes the linker keep every exported method of
// every type that can reach an interface (all of the AWS clients'
// operations among them), and it made the ui bootstrap 22 MB against the
// others' 15. Every value goes through one of out's escaping methods
// (text and double-quoted attributes alike; URL parts escaped for their
// place first); only literals of this package are written raw.

// out is a page being written.
type out struct{ strings.Builder }

// raw writes trusted markup: literals of this package, or SVG it built.
func (o *out) raw(s ...string) {
	for _, x := range s {
		o.WriteString(x)
	}
}

// text writes s escaped for element content or a double-quoted attribute.
func (o *out) text(s string) { o.WriteString(html.EscapeString(s)) }

// num writes an integer.
func (o *out) num(n int64) { o.WriteString(strconv.FormatInt(n, 10)) }

// seg writes s as one URL path segment inside an attribute.
func (o *out) seg(s string) { o.text(url.PathEscape(s)) }

// query writes s as a URL query value inside an attribute.
func (o *out) query(s string) { o.text(url.QueryEscape(s)) }

// href writes a link target that may come from a user: only a path of this
// site or an http(s) address; anything else (javascript:, data:) becomes a
// harmless placeholder, as html/template does.
func (o *out) href(s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https") || (u.Scheme == "" && !strings.HasPrefix(s, "/")) {
		s = "#ZgotmplZ"
	}
	o.text(s)
}

// state writes a state badge.
func (o *out) state(s string) {
	o.raw(`<span class="state `)
	o.text(s)
	o.raw(`">`)
	o.text(s)
	o.raw(`</span>`)
}

// ifRaw writes s when cond holds.
func (o *out) ifRaw(cond bool, s string) {
	if cond {
		o.raw(s)
	}
}

func shortID(s string) string {
	s = strings.TrimPrefix(s, "sha256:")
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func duration(start, end *time.Time) string {
	if start == nil {
		return ""
	}
	stop := time.Now()
	if end != nil {
		stop = *end
	}
	return stop.Sub(*start).Round(100 * time.Millisecond).String()
}

func join(s []string) string { return strings.Join(s, ", ") }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// writePage writes the page named name with data (a page struct of this
// package).
func writePage(o *out, name string, data any) error {
	switch p := data.(type) {
	case page:
		if name == "login" {
			loginPage(o, p)
		} else {
			errorPage(o, p)
		}
	case runsPage:
		runsHTML(o, p)
	case runPage:
		runHTML(o, p)
	case jobPage:
		jobHTML(o, p)
	case queuePage:
		queueHTML(o, p)
	case runnersPage:
		runnersHTML(o, p)
	case projectsPage:
		projectsHTML(o, p)
	case projectPage:
		projectHTML(o, p)
	case environmentPage:
		environmentHTML(o, p)
	case dispatchPage:
		dispatchHTML(o, p)
	default:
		return fmt.Errorf("ui: no page %s for %T", name, data)
	}
	return nil
}

func top(o *out, p page) {
	o.raw(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>`)
	o.text(p.Title)
	o.raw(` · ForgeCI</title><link rel="stylesheet" href="/static/app.css"><script src="/static/app.js" defer></script></head>
<body><header><a class="brand" href="/">ForgeCI</a>`)
	if p.User.Name != "" {
		o.raw(`<nav><a href="/">Runs</a> <a href="/queue">Queue</a> <a href="/projects">Projects</a>`)
		o.ifRaw(p.User.IsAdmin(), ` <a href="/runners">Runners</a>`)
		o.raw(`</nav>
<form method="post" action="/logout" class="who"><span>`)
		o.text(p.User.Name)
		o.raw(` (`)
		o.text(p.User.Role)
		o.raw(`)</span> <button>Log out</button></form>`)
	}
	o.raw("</header><main>\n")
}

func bottom(o *out) { o.raw("</main></body></html>") }

func loginPage(o *out, p page) {
	top(o, p)
	o.raw("<h1>Log in</h1>\n")
	if p.Error != "" {
		o.raw(`<p class="error" id="error">`)
		o.text(p.Error)
		o.raw("</p>")
	}
	o.raw(`<form method="post" action="/login`)
	if p.Next != "" {
		o.raw(`?next=`)
		o.query(p.Next)
	}
	o.raw(`" class="login">
<label for="token">API token</label> <input type="password" id="token" name="token" autocomplete="off" required>
<button type="submit" id="login">Log in</button></form>
<p class="hint">Make a token with <code>forgeci user create</code>, or ask an admin.</p>
`)
	bottom(o)
}

func errorPage(o *out, p page) {
	top(o, p)
	o.raw("<h1>")
	o.text(p.Title)
	o.raw(`</h1><p class="error">`)
	o.text(p.Error)
	o.raw("</p>")
	if len(p.Details) > 0 {
		o.raw(`<ul class="details">`)
		for _, d := range p.Details {
			o.raw("<li><code>")
			o.text(d.String())
			o.raw("</code></li>")
		}
		o.raw("</ul>")
	}
	bottom(o)
}

// runHref writes a run's path.
func runHref(o *out, runID string) { o.raw(`/runs/`); o.seg(runID) }

func jobHref(o *out, runID, jobID string) {
	runHref(o, runID)
	o.raw(`/jobs/`)
	o.seg(jobID)
}

// runLink writes a link to a run: "project #n".
func runLink(o *out, runID, project string, number int64) {
	o.raw(`<a href="`)
	runHref(o, runID)
	o.raw(`">`)
	o.text(project)
	o.raw(" #")
	o.num(number)
	o.raw("</a>")
}

// jobLink writes a link to a job: "project #n name".
func jobLink(o *out, runID, jobID, project string, number int64, name string) {
	o.raw(`<a href="`)
	jobHref(o, runID, jobID)
	o.raw(`">`)
	o.text(project)
	o.raw(" #")
	o.num(number)
	o.raw(" ")
	o.text(name)
	o.raw("</a>")
}

func queueHTML(o *out, p queuePage) {
	top(o, p.page)
	o.raw(`<h1>Queue</h1><p>Jobs waiting for a runner, oldest first, with the runners whose labels, projects, trust and features fit.</p>
<table class="queue" id="queue"><thead><tr><th>Job</th><th>Labels</th><th>Waiting</th><th>Runners that could take it</th></tr></thead><tbody>
`)
	for _, j := range p.Jobs {
		o.raw(`<tr id="queued-`)
		o.text(j.JobID)
		o.raw(`"><td>`)
		jobLink(o, j.RunID, j.JobID, j.Project, j.RunNumber, j.Name)
		o.raw("</td><td>")
		o.text(join(j.Labels))
		o.raw(`</td>
<td class="waiting">`)
		o.text(seconds(j.Waiting))
		o.raw(`</td>
<td class="eligible">`)
		if j.Eligible == 0 {
			o.raw(`<span class="state FAILED">none registered</span>`)
		} else {
			o.num(int64(j.Eligible))
			o.raw(" (")
			o.num(int64(j.Alive))
			o.raw(" alive: polled in the last 2 minutes or running a job)")
			if len(j.Runners) > 0 {
				o.raw(": ")
				o.text(join(j.Runners))
			}
		}
		o.raw("</td></tr>\n")
	}
	if len(p.Jobs) == 0 {
		o.raw(`<tr><td colspan="4">Nothing is waiting.</td></tr>`)
	}
	o.raw("</tbody></table>\n")
	bottom(o)
}

func runnersHTML(o *out, p runnersPage) {
	top(o, p.page)
	o.raw(`<h1>Runners</h1><table class="runners"><thead><tr><th>Name</th><th>Labels</th><th>Projects</th><th>Untrusted work</th><th>Version</th><th>Slots in use</th><th>Running now</th><th>Failed (7 days)</th><th>Registered</th><th>Last seen</th><th>Status</th><th></th></tr></thead><tbody>
`)
	for _, r := range p.Runners {
		runnerRow(o, r)
	}
	if len(p.Runners) == 0 {
		o.raw(`<tr><td colspan="12">No runners registered.</td></tr>`)
	}
	o.raw("</tbody></table>\n")
	if p.Next != "" {
		o.raw(`<p><a href="/runners?cursor=`)
		o.query(p.Next)
		o.raw(`" id="next-page">More runners</a></p>`)
	}
	bottom(o)
}

func runnerRow(o *out, r store.RunnerInfo) {
	o.raw(`<tr id="runner-`)
	o.text(r.Name)
	o.raw(`"><td>`)
	o.text(r.Name)
	o.raw("</td><td>")
	o.text(join(r.Labels))
	o.raw("</td><td>")
	if len(r.ProjectNames) > 0 {
		o.text(join(r.ProjectNames))
	} else {
		o.raw("all")
	}
	o.raw("</td><td>")
	if r.UntrustedOnly {
		o.raw("only")
	} else {
		o.raw(yesNo(r.Untrusted))
	}
	o.raw("</td>\n<td>")
	o.text(cmp.Or(r.Version, "unknown"))
	o.raw(`</td><td class="slots">`)
	o.num(int64(len(r.Jobs)))
	if r.Slots != 0 {
		o.raw(" of ")
		o.num(int64(r.Slots))
	}
	o.raw("</td>\n<td>")
	for _, j := range r.Jobs {
		jobLink(o, j.RunID, j.JobID, j.Project, j.RunNumber, j.Name)
		o.raw("<br>")
	}
	if len(r.Jobs) == 0 {
		o.raw("idle")
	}
	o.raw(`</td>
<td class="failures">`)
	o.num(int64(r.Failures))
	o.raw(" of ")
	o.num(int64(r.Attempts))
	o.raw("</td><td>")
	o.text(when(r.CreatedAt))
	o.raw("</td><td>")
	if r.LastSeenAt != nil {
		o.text(when(*r.LastSeenAt))
	} else {
		o.raw("never")
	}
	o.raw("</td>\n<td>")
	if r.RevokedAt != nil {
		o.raw(`<span class="state REVOKED">revoked</span>`)
	} else {
		o.raw("active")
	}
	o.raw("</td>\n<td>")
	if r.RevokedAt == nil {
		o.raw(`<form method="post" action="/runners/`)
		o.seg(r.ID)
		o.raw(`/revoke"><button>Revoke</button></form>`)
	}
	o.raw("</td></tr>\n")
}
