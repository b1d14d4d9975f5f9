package ui

import (
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// The environment and manual-run pages' markup (render.go says how values
// are escaped).

func environmentHTML(o *out, p environmentPage) {
	e := p.Environment
	top(o, p.page)
	o.raw(`<p><a href="`)
	projectHref(o, p.Project.ID)
	o.raw(`">`)
	o.text(p.Project.Name)
	o.raw("</a></p>\n<h1>")
	o.text(e.Name)
	o.raw("</h1>\n")
	if p.Known {
		o.raw(`<dl class="facts"><dt>Reviewers</dt><dd>`)
		if e.ReviewerRole != "" {
			o.raw("members with the ")
			o.text(e.ReviewerRole)
			o.raw(" role")
			o.ifRaw(e.PreventSelfReview, ", not of their own runs")
		} else {
			o.raw("none: deployments go on at once")
		}
		o.raw("</dd>\n<dt>Allowed refs</dt><dd>")
		if len(e.AllowedRefs) > 0 {
			o.text(join(e.AllowedRefs))
		} else {
			o.raw("any")
		}
		o.raw("</dd>")
		if len(e.Secrets) > 0 {
			o.raw("<dt>Secrets</dt><dd>")
			o.text(join(e.Secrets))
			o.raw("</dd>")
		}
		o.raw("</dl>\n")
	} else {
		o.raw("<p>No rules: jobs name this environment, but no admin made it.</p>\n")
	}
	o.raw(`<h2>Deployments</h2><table class="deployments" id="deployments"><thead><tr><th>Run</th><th>Ref</th><th>Decision</th><th>By</th><th>Job</th><th>When</th></tr></thead><tbody>
`)
	for _, d := range p.Deployments {
		deploymentRow(o, d)
	}
	if len(p.Deployments) == 0 {
		o.raw(`<tr><td colspan="6">No deployments yet.</td></tr>`)
	}
	o.raw("</tbody></table>\n")
	if p.Next != "" {
		o.raw(`<p><a href="`)
		projectHref(o, p.Project.ID)
		o.raw(`/environments/`)
		o.seg(e.Name)
		o.raw(`?cursor=`)
		o.query(p.Next)
		o.raw(`" id="next-page">Older deployments</a></p>`)
	}
	bottom(o)
}

func deploymentRow(o *out, d store.Deployment) {
	o.raw(`<tr id="deployment-`)
	o.num(d.ID)
	o.raw(`"><td>`)
	if d.JobID != "" {
		o.raw(`<a href="`)
		jobHref(o, d.RunID, d.JobID)
		o.raw(`">#`)
		o.num(d.RunNumber)
		o.raw(" ")
		o.text(d.JobName)
		o.raw("</a>")
	} else {
		o.raw("#")
		o.num(d.RunNumber)
		o.raw(" ")
		o.text(d.JobName)
	}
	if d.URL != "" {
		o.raw(` <a href="`)
		o.href(d.URL)
		o.raw(`" rel="noopener">`)
		o.text(d.URL)
		o.raw("</a>")
	}
	o.raw("</td><td><code>")
	o.text(d.Ref)
	o.raw("</code> ")
	o.text(shortID(d.SHA))
	o.ifRaw(d.Dirty, " (uncommitted changes)")
	if len(d.Inputs) > 0 {
		o.raw("<br>inputs ")
		runInputs(o, d.Inputs)
	}
	o.raw("<br><small>")
	o.text(d.Trigger)
	o.raw(`</small></td>
<td class="decision">`)
	o.text(d.Decision)
	note(o, d.Reason)
	o.raw("</td><td>")
	o.text(d.DecidedBy)
	if d.DecidedAt != nil {
		o.raw(" ")
		o.text(when(*d.DecidedAt))
	}
	o.raw("</td>\n<td>")
	if d.State != "" {
		o.state(d.State)
	} else {
		o.raw("(run no longer kept)")
	}
	o.raw("</td><td>")
	o.text(when(d.CreatedAt))
	o.raw("</td></tr>\n")
}

func dispatchHTML(o *out, p dispatchPage) {
	top(o, p.page)
	o.raw("<h1>Run ")
	o.text(p.Project.Name)
	o.raw(" by hand</h1>\n<p>The newest snapshot submitted from <code>")
	o.text(p.Ref)
	o.raw("</code> runs again")
	o.ifRaw(p.Project.Secrets, ", with the project's secrets")
	o.raw(`.</p>
<form method="post" action="`)
	projectHref(o, p.Project.ID)
	o.raw(`/run" class="dispatch" id="dispatch">
<label>Ref <input name="ref" id="dispatch-ref" value="`)
	o.text(p.Ref)
	o.raw(`" required></label>
`)
	for _, in := range p.Inputs {
		dispatchInput(o, in)
	}
	o.raw(`<button id="dispatch-run">Run</button></form>
`)
	bottom(o)
}

func dispatchInput(o *out, in pipeline.Input) {
	def := ""
	if in.Default != nil {
		def = *in.Default
	}
	o.raw("<label>")
	o.text(in.Name)
	o.ifRaw(in.Required, " (required)")
	if in.Description != "" {
		o.raw(` <span class="hint">`)
		o.text(in.Description)
		o.raw("</span>")
	}
	o.raw("\n")
	nameAttrs := func() {
		o.raw(`name="input.`)
		o.text(in.Name)
		o.raw(`" id="input-`)
		o.text(in.Name)
		o.raw(`"`)
	}
	switch in.Type {
	case "boolean":
		o.raw("<select ")
		nameAttrs()
		o.raw("><option")
		o.ifRaw(in.Default != nil && def == "true", " selected")
		o.raw(">true</option><option")
		o.ifRaw(in.Default == nil || def == "false", " selected")
		o.raw(">false</option></select>\n")
	case "choice":
		o.raw("<select ")
		nameAttrs()
		o.raw(">")
		for _, opt := range in.Options {
			o.raw("<option")
			o.ifRaw(in.Default != nil && def == opt, " selected")
			o.raw(">")
			o.text(opt)
			o.raw("</option>")
		}
		o.raw("</select>\n")
	default:
		o.raw("<input ")
		nameAttrs()
		o.ifRaw(in.Type == "number", ` type="number" step="any"`)
		if in.Default != nil {
			o.raw(` value="`)
			o.text(def)
			o.raw(`"`)
		}
		o.ifRaw(in.Required && in.Default == nil, " required")
		o.raw(">")
	}
	o.raw("</label>\n")
}
