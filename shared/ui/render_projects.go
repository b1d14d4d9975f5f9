package ui

import (
	"cmp"

	"github.com/forgeci/forgeci/shared/store"
)

// The project pages' markup (render.go says how values are escaped).

func projectHref(o *out, id string) { o.raw(`/projects/`); o.seg(id) }

func projectsHTML(o *out, p projectsPage) {
	top(o, p.page)
	o.raw(`<h1>Projects</h1><table class="projects"><thead><tr><th>Project</th><th>Your role</th><th>Secrets</th><th>Runs</th><th>Last run</th></tr></thead><tbody>
`)
	for _, pr := range p.Projects {
		o.raw(`<tr id="project-`)
		o.text(pr.Name)
		o.raw(`"><td><a href="`)
		projectHref(o, pr.ID)
		o.raw(`">`)
		o.text(pr.Name)
		o.raw("</a></td><td>")
		o.text(pr.Role)
		o.raw("</td><td>", yesNo(pr.Secrets), "</td>\n<td><a href=\"/?project=")
		o.query(pr.Name)
		o.raw(`">`)
		o.num(pr.Runs)
		o.raw("</a></td><td>")
		o.state(pr.LastState)
		o.raw("</td></tr>\n")
	}
	if len(p.Projects) == 0 {
		o.raw(`<tr><td colspan="5">You are not a member of any project.</td></tr>`)
	}
	o.raw("</tbody></table>\n")
	if p.Next != "" {
		o.raw(`<p><a href="/projects?cursor=`)
		o.query(p.Next)
		o.raw(`" id="next-page">More projects</a></p>`)
	}
	if p.User.IsAdmin() {
		o.raw(`
<h2>New project</h2><form method="post" action="/projects" class="new-project">
<label>Name <input name="name" id="project-name" required placeholder="acme/app"></label>
<label>Default branch <input name="default_branch" value="main"></label> <button id="create-project">Create</button></form>`)
	}
	bottom(o)
}

func projectHTML(o *out, p projectPage) {
	pr := p.Project
	top(o, p.page)
	o.raw("<h1>")
	o.text(pr.Name)
	o.raw(`</h1>
<dl class="facts"><dt>Default branch</dt><dd>`)
	o.text(pr.DefaultBranch)
	o.raw(`</dd><dt>Your role</dt><dd>`)
	o.text(pr.Role)
	o.ifRaw(pr.Secrets, ", runs you start get secrets")
	o.raw(`</dd>
<dt>Runs</dt><dd><a href="/?project=`)
	o.query(pr.Name)
	o.raw(`">`)
	o.num(pr.Runs)
	o.raw("</a> kept ")
	o.num(int64(p.Storage.RetentionDays))
	o.raw(" days after they end</dd></dl>\n")
	if pr.Role != "read" {
		o.raw(`<p><a class="button" id="run-by-hand" href="`)
		projectHref(o, pr.ID)
		o.raw(`/run">Run by hand</a></p>`)
	}
	projectSchedules(o, p.Schedules)
	if p.PassRate != "" {
		o.raw("<h2>Pass rate per branch</h2>")
		o.raw(string(p.PassRate)) // SVG built by passRateChart, its text escaped
	}
	projectEnvironments(o, p)
	projectVariables(o, p)
	projectStorage(o, p.Storage)
	projectNotifications(o, p)
	projectBadge(o, p)
	if p.IsAdmin {
		projectAdmin(o, p)
	}
	bottom(o)
}

func projectSchedules(o *out, ss []store.ScheduleInfo) {
	if len(ss) == 0 {
		return
	}
	o.raw(`<h2>Schedules</h2><table class="schedules" id="schedules"><thead><tr><th>Cron (UTC)</th><th>Missed slots</th><th>Next</th><th>Last</th></tr></thead><tbody>
`)
	for _, s := range ss {
		o.raw("<tr><td><code>")
		o.text(s.Cron)
		o.raw("</code></td><td>")
		o.text(s.Missed)
		o.raw("</td><td>")
		o.text(when(s.Next))
		o.raw("</td>\n<td>")
		switch {
		case s.LastSlot == nil:
			o.raw("never")
		case s.LastSkipped:
			o.text(when(*s.LastSlot))
			o.raw(": skipped")
			note(o, s.LastNote)
		case s.LastRunID != "":
			o.text(when(*s.LastSlot))
			o.raw(`: <a href="`)
			runHref(o, s.LastRunID)
			o.raw(`">fired</a> `)
			o.text(s.Late().String())
			o.raw(" late")
		default:
			o.text(when(*s.LastSlot))
			o.raw(": fired ")
			o.text(s.Late().String())
			o.raw(" late, the run being made")
			note(o, s.LastNote)
		}
		o.raw("</td></tr>\n")
	}
	o.raw("</tbody></table>")
}

// note writes " (note)" when there is one.
func note(o *out, s string) {
	if s != "" {
		o.raw(" (")
		o.text(s)
		o.raw(")")
	}
}

func projectEnvironments(o *out, p projectPage) {
	if len(p.Environments) == 0 {
		return
	}
	o.raw(`<h2>Environments</h2><table class="environments" id="environments"><thead><tr><th>Environment</th><th>Reviewers</th><th>Allowed refs</th><th>Secrets</th></tr></thead><tbody>
`)
	for _, e := range p.Environments {
		o.raw(`<tr id="environment-`)
		o.text(e.Name)
		o.raw(`"><td><a href="`)
		projectHref(o, p.Project.ID)
		o.raw(`/environments/`)
		o.seg(e.Name)
		o.raw(`">`)
		o.text(e.Name)
		o.raw("</a></td><td>")
		o.text(cmp.Or(e.ReviewerRole, "none"))
		o.raw("</td>\n<td>")
		if len(e.AllowedRefs) > 0 {
			o.text(join(e.AllowedRefs))
		} else {
			o.raw("any")
		}
		o.raw("</td><td>")
		if p.IsAdmin {
			o.text(join(e.Secrets))
		} else {
			o.raw("(admins)")
		}
		o.raw("</td></tr>")
	}
	o.raw("</tbody></table>\n<p>Set them with <code>forgeci env set</code>; each links to its deployment history.</p>")
}

// projectVariables lists the project's variables with their values: not
// secret, every member sees them.
func projectVariables(o *out, p projectPage) {
	o.raw(`<h2>Variables</h2><p>Read in pipelines as <code>${{ vars.NAME }}</code>; not secret: every member and every run sees them. Set with <code>forgeci var set NAME VALUE -p `)
	o.text(p.Project.Name)
	o.raw(`</code>.</p><table class="variables" id="variables"><thead><tr><th>Name</th><th>Value</th><th>Set</th></tr></thead><tbody>`)
	for _, v := range p.Variables {
		o.raw("<tr><td><code>")
		o.text(v.Name)
		o.raw(`</code></td><td><code class="input">`)
		o.text(v.Value)
		o.raw("</code></td><td>")
		o.text(when(v.UpdatedAt))
		o.raw("</td></tr>")
	}
	if len(p.Variables) == 0 {
		o.raw(`<tr><td colspan="3">none</td></tr>`)
	}
	o.raw("</tbody></table>\n")
}

func projectStorage(o *out, s store.Storage) {
	o.raw(`
<h2>Storage</h2><table class="storage" id="storage"><tbody>
<tr><th>Logs</th><td>`, humanBytes(s.LogBytes), `</td></tr><tr><th>Artifacts</th><td>`, humanBytes(s.ArtifactBytes), `</td></tr>
<tr><th>Caches</th><td>`, humanBytes(s.CacheBytes), ` of `, humanBytes(s.CacheQuotaBytes), `</td></tr>
<tr><th>Blobs held (sources, artifacts, caches, each once)</th><td>`, humanBytes(s.BlobBytes), ` of `,
		humanBytes(s.StorageQuotaBytes), "</td></tr></tbody></table>\n")
}

func projectNotifications(o *out, p projectPage) {
	if len(p.Notifications) == 0 && len(p.Hooks) == 0 {
		return
	}
	o.raw("<h2>Notifications</h2>\n")
	if len(p.Hooks) > 0 {
		o.raw(`<p>Hooks (add or remove them with <code>forgeci project hook</code>):</p><ul class="hooks" id="hooks">`)
		for _, h := range p.Hooks {
			o.raw("<li><code>")
			o.text(h.URL)
			o.raw("</code> (")
			o.text(h.Format)
			o.raw(") on ")
			o.text(join(h.Events))
			o.raw("</li>")
		}
		o.raw("</ul>")
	}
	o.raw(`
<table class="notifications" id="notifications"><thead><tr><th>Event</th><th>Run</th><th>To</th><th>State</th><th>Attempts</th><th>Last error</th><th>Sent</th></tr></thead><tbody>
`)
	for _, n := range p.Notifications {
		o.raw("<tr><td>")
		o.text(n.Event)
		o.raw(`</td><td><a href="`)
		runHref(o, n.RunID)
		o.raw(`">#`)
		o.num(n.RunNumber)
		o.raw("</a></td><td>")
		o.text(n.HookHost)
		badge := map[string]string{"DELIVERED": "PASSED", "FAILED": "FAILED"}[n.State]
		o.raw(`</td><td><span class="state `, cmp.Or(badge, "PENDING"), `">`)
		o.text(n.State)
		o.raw("</span></td>\n<td>")
		o.num(int64(n.Attempts))
		o.raw("</td><td>")
		if n.LastError != nil {
			o.text(*n.LastError)
		}
		if n.LastStatus != nil {
			o.raw(" (")
			o.num(int64(*n.LastStatus))
			o.raw(")")
		}
		o.raw("</td><td>")
		if n.DeliveredAt != nil {
			o.text(when(*n.DeliveredAt))
		}
		o.raw("</td></tr>\n")
	}
	if len(p.Notifications) == 0 {
		o.raw(`<tr><td colspan="7">None sent yet.</td></tr>`)
	}
	o.raw("</tbody></table>")
}

func projectBadge(o *out, p projectPage) {
	o.raw("\n<h2>Status badge</h2>")
	if !p.Storage.BadgesPublic {
		o.raw("<p>Badges are private: served only to the project's members.</p>\n")
		return
	}
	o.raw(`<p><img id="badge" src="/v1/projects/`)
	o.seg(p.Project.ID)
	o.raw(`/badge.svg" alt="build status"></p>
<p>In a README: <code id="badge-markdown">![build](/v1/projects/`)
	o.text(p.Project.ID)
	o.raw(`/badge.svg?branch=`)
	o.query(p.Project.DefaultBranch)
	o.raw(")</code> (prefix the address of this ForgeCI)</p>\n")
}

func projectAdmin(o *out, p projectPage) {
	id := p.Project.ID
	o.raw(`<form method="post" action="`)
	projectHref(o, id)
	o.raw(`/badges" class="badges"><label><input type="checkbox" name="public" id="badges-public"`)
	o.ifRaw(p.Storage.BadgesPublic, " checked")
	o.raw(`> serve the status badges without login</label> <button id="set-badges">Save</button></form>
<h2>Members</h2><table class="members"><thead><tr><th>User</th><th>Role</th><th>Secrets</th><th></th></tr></thead><tbody>
`)
	for _, m := range p.Members {
		o.raw(`<tr id="member-`)
		o.text(m.UserName)
		o.raw(`"><td>`)
		o.text(m.UserName)
		o.raw("</td><td>")
		o.text(m.Role)
		o.raw("</td><td>", yesNo(m.Secrets), "</td>\n<td><form method=\"post\" action=\"")
		projectHref(o, id)
		o.raw(`/members/`)
		o.seg(m.UserID)
		o.raw(`/remove"><button>Remove</button></form></td></tr>` + "\n")
	}
	if len(p.Members) == 0 {
		o.raw(`<tr><td colspan="4">No members.</td></tr>`)
	}
	o.raw("</tbody></table>\n")
	if p.NextMembers != "" {
		o.raw(`<p><a href="`)
		projectHref(o, id)
		o.raw(`?members=`)
		o.query(p.NextMembers)
		o.raw(`">More members</a></p>`)
	}
	o.raw(`<form method="post" action="`)
	projectHref(o, id)
	o.raw(`/members" class="member"><label>User <input name="user" id="member-user" required></label>
<label>Role <select name="role" id="member-role"><option>read</option><option selected>write</option><option>admin</option></select></label>
<label><input type="checkbox" name="secrets" id="member-secrets"> runs they start get the project's secrets</label> <button id="set-member">Add or change</button></form>
<h2>Secrets</h2><p>Values are never shown; set them with <code>forgeci secret set --project `)
	o.text(p.Project.Name)
	o.raw(` --name NAME</code>.</p>
<ul class="secrets">`)
	for _, s := range p.Secrets {
		o.raw("<li><code>")
		o.text(s.Name)
		o.raw("</code> (set ")
		o.text(when(s.UpdatedAt))
		o.raw(")</li>")
	}
	if len(p.Secrets) == 0 {
		o.raw("<li>none</li>")
	}
	o.raw("</ul>\n")
	if p.NextSecrets != "" {
		o.raw(`<p><a href="`)
		projectHref(o, id)
		o.raw(`?secrets=`)
		o.query(p.NextSecrets)
		o.raw(`">More secrets</a></p>`)
	}
}
