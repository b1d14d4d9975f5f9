package api_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/api"
	_ "github.com/forgeci/forgeci/shared/ui" // the dashboard's pages join the matrix
)

// What a route needs of its caller.
const (
	needRead   = "project read"
	needWrite  = "project write"
	needTrust  = "project write and secrets" // for what makes a trusted run
	needAdmin  = "project admin"
	needGlobal = "global admin"
	needList   = "any user; lists only what they can read"
	needAny    = "any user"
)

// tenancyCase is one user route or dashboard page: called with the fixture's
// placeholders filled in, it answers ok to a caller with exactly the role
// it needs.
type tenancyCase struct {
	route  string // the route as registered, "METHOD /path/{param}"
	path   string // with {done}, {live}, {project}, ... placeholders
	need   string
	body   func(f *tenancy) any
	ok     int
	marker func(f *tenancy) string // for lists: what only acme/app's readers may see
}

func (c tenancyCase) page() bool { return !strings.Contains(c.route, " /v1/") }

func tenancyCases() []tenancyCase {
	noBody := func(*tenancy) any { return nil }
	obj := func(m map[string]any) func(*tenancy) any { return func(*tenancy) any { return m } }
	form := func(s string) func(*tenancy) any { return func(*tenancy) any { return s } }
	doneRun := func(f *tenancy) string { return f.done.ID }
	liveJob := func(f *tenancy) string { return f.liveJob }
	projectName := func(*tenancy) string { return "acme/app" }
	source := func(f *tenancy) any {
		return map[string]any{"project": "acme/app", "source": f.source}
	}
	return []tenancyCase{
		{"POST /v1/uploads", "/v1/uploads", needWrite, func(f *tenancy) any {
			return map[string]any{"project": "acme/app", "digest": digestOf([]byte("new blob")), "size": 8}
		}, 200, nil},
		{"POST /v1/runs", "/v1/runs", needWrite, source, 201, nil},
		// acme/app is on GitHub: its manual run is a delivery for the
		// worker (TestDispatch and TestGitHubDispatch run them).
		{"POST /v1/projects/{project}/dispatch", "/v1/projects/{project}/dispatch", needWrite,
			obj(map[string]any{"ref": "main"}), 202, nil},
		{"GET /v1/runs/{run_id}", "/v1/runs/{done}", needRead, noBody, 200, nil},
		{"GET /v1/runs/{run_id}/jobs/{job_id}/logs", "/v1/runs/{done}/jobs/{doneJob}/logs", needRead, noBody, 200, nil},
		{"GET /v1/runs/{run_id}/jobs/{job_id}/steps", "/v1/runs/{done}/jobs/{doneJob}/steps?times=1", needRead, noBody, 200, nil},
		{"GET /v1/runs/{run_id}/jobs/{job_id}/report", "/v1/runs/{done}/jobs/{doneJob}/report", needRead, noBody, 200, nil},
		// acme/app's badges are not public: its readers only (TestBadge has public ones).
		{"GET /v1/projects/{project}/badge.svg", "/v1/projects/{project}/badge.svg", needRead, noBody, 200, nil},
		{"GET /v1/runs/{run_id}/artifacts", "/v1/runs/{done}/artifacts", needRead, noBody, 200, nil},
		{"GET /v1/runs/{run_id}/jobs/{job_id}/artifacts/{name}", "/v1/runs/{done}/jobs/{doneJob}/artifacts/report", needRead, noBody, 200, nil},
		{"POST /v1/runs/{run_id}/cancel", "/v1/runs/{live}/cancel", needWrite, obj(nil), 202, nil},
		{"POST /v1/runs/{run_id}/jobs/{job_id}/cancel", "/v1/runs/{live}/jobs/{liveJob}/cancel", needWrite, obj(nil), 202, nil},
		{"POST /v1/runs/{run_id}/approve", "/v1/runs/{waiting}/approve", needWrite, obj(nil), 200, nil},
		{"POST /v1/runs/{run_id}/reject", "/v1/runs/{waiting}/reject", needWrite, obj(nil), 200, nil},
		{"GET /v1/projects", "/v1/projects", needList, noBody, 200, projectName},
		{"POST /v1/projects", "/v1/projects", needGlobal, obj(map[string]any{"name": "new/proj"}), 201, nil},
		{"GET /v1/projects/{project}", "/v1/projects/{project}", needRead, noBody, 200, nil},
		{"GET /v1/projects/{project}/members", "/v1/projects/{project}/members", needAdmin, noBody, 200, nil},
		{"POST /v1/projects/{project}/members", "/v1/projects/{project}/members", needAdmin,
			obj(map[string]any{"user": "nina", "role": "read"}), 200, nil},
		{"POST /v1/projects/{project}/members/{user_id}/remove", "/v1/projects/{project}/members/{reader}/remove", needAdmin, obj(nil), 200, nil},
		{"GET /v1/projects/{project}/secrets", "/v1/projects/{project}/secrets", needAdmin, noBody, 200, nil},
		{"POST /v1/projects/{project}/secrets", "/v1/projects/{project}/secrets", needAdmin,
			obj(map[string]any{"name": "NEW_ONE", "value": "new secret value"}), 200, nil},
		{"POST /v1/projects/{project}/secrets/{name}/delete", "/v1/projects/{project}/secrets/DEPLOY_TOKEN/delete", needAdmin, obj(nil), 200, nil},
		{"GET /v1/projects/{project}/variables", "/v1/projects/{project}/variables", needRead, noBody, 200, nil},
		{"POST /v1/projects/{project}/variables", "/v1/projects/{project}/variables", needAdmin,
			obj(map[string]any{"name": "NEW_VAR", "value": "a value"}), 200, nil},
		{"POST /v1/projects/{project}/variables/{name}/delete", "/v1/projects/{project}/variables/REGION/delete", needAdmin, obj(nil), 200, nil},
		{"GET /v1/projects/{project}/storage", "/v1/projects/{project}/storage", needRead, noBody, 200, nil},
		{"GET /v1/projects/{project}/environments", "/v1/projects/{project}/environments", needRead, noBody, 200, nil},
		{"POST /v1/projects/{project}/environments/{environment}", "/v1/projects/{project}/environments/staging", needAdmin,
			obj(map[string]any{"allowed_refs": []string{"main"}}), 200, nil},
		{"POST /v1/projects/{project}/environments/{environment}/delete", "/v1/projects/{project}/environments/production/delete",
			needAdmin, obj(nil), 200, nil},
		{"GET /v1/projects/{project}/deployments", "/v1/projects/{project}/deployments?environment=production", needRead, noBody, 200, nil},
		{"POST /v1/runs/{run_id}/jobs/{job_id}/deployment/approve", "/v1/runs/{deploying}/jobs/{shipJob}/deployment/approve",
			needWrite, obj(nil), 200, nil},
		{"POST /v1/runs/{run_id}/jobs/{job_id}/deployment/reject", "/v1/runs/{deploying}/jobs/{shipJob}/deployment/reject",
			needWrite, obj(map[string]any{"comment": "not now"}), 200, nil},
		{"POST /v1/projects/{project}/settings", "/v1/projects/{project}/settings", needAdmin,
			obj(map[string]any{"retention_days": 30, "cache_quota_bytes": 1 << 30}), 200, nil},
		{"GET /v1/gc", "/v1/gc", needGlobal, noBody, 200, nil},
		{"GET /v1/runs", "/v1/runs", needList, noBody, 200, doneRun},
		{"GET /v1/queue", "/v1/queue", needList, noBody, 200, liveJob},
		{"POST /v1/projects/{project}/hooks", "/v1/projects/{project}/hooks", needAdmin,
			obj(map[string]any{"url": "https://hooks.example.com/x", "events": []string{"branch_failed"}}), 201, nil},
		{"GET /v1/projects/{project}/hooks", "/v1/projects/{project}/hooks", needAdmin, noBody, 200, nil},
		{"POST /v1/projects/{project}/hooks/{hook_id}/delete", "/v1/projects/{project}/hooks/{hook}/delete", needAdmin, obj(nil), 200, nil},
		{"GET /v1/projects/{project}/notifications", "/v1/projects/{project}/notifications", needRead, noBody, 200, nil},
		{"GET /v1/runs/{run_id}/jobs/{job_id}", "/v1/runs/{done}/jobs/{doneJob}", needRead, noBody, 200, nil},
		{"POST /v1/runs/{run_id}/retry", "/v1/runs/{done}/retry", needTrust, obj(nil), 201, nil},
		{"POST /v1/runs/{run_id}/jobs/{job_id}/retry", "/v1/runs/{done}/jobs/{doneJob}/retry", needTrust, obj(nil), 201, nil},
		{"GET /v1/me", "/v1/me", needAny, noBody, 200, nil},
		{"GET /v1/runners", "/v1/runners", needGlobal, noBody, 200, nil},
		{"POST /v1/runners/{runner_id}/revoke", "/v1/runners/{runner}/revoke", needGlobal, obj(nil), 200, nil},
		{"POST /v1/registration-tokens", "/v1/registration-tokens", needGlobal, obj(nil), 201, nil},
		{"GET /v1/registration-tokens", "/v1/registration-tokens", needGlobal, noBody, 200, nil},
		{"POST /v1/registration-tokens/{token_id}/revoke", "/v1/registration-tokens/{registration}/revoke", needGlobal, obj(nil), 200, nil},
		{"GET /v1/users", "/v1/users", needGlobal, noBody, 200, nil},
		{"POST /v1/users", "/v1/users", needGlobal, obj(map[string]any{"name": "newbie", "role": "user"}), 201, nil},
		{"POST /v1/users/{user_id}/tokens", "/v1/users/{writer}/tokens", needGlobal, obj(nil), 201, nil},
		{"GET /v1/users/{user_id}/tokens", "/v1/users/{writer}/tokens", needGlobal, noBody, 200, nil},
		{"POST /v1/users/{user_id}/tokens/{token_id}/revoke", "/v1/users/{writer}/tokens/{writerToken}/revoke", needGlobal, obj(nil), 200, nil},
		{"POST /v1/users/{user_id}/disable", "/v1/users/{reader}/disable", needGlobal, obj(nil), 200, nil},
		{"GET /v1/deliveries", "/v1/deliveries", needList, noBody, 200, func(f *tenancy) string { return f.delivery }},
		{"POST /v1/deliveries/{guid}/retry", "/v1/deliveries/{guid}/retry", needTrust, obj(nil), 202, nil},

		{"GET /", "/", needList, noBody, 200, doneRun},
		{"GET /queue", "/queue", needList, noBody, 200, liveJob},
		{"GET /runs/{run_id}", "/runs/{done}", needRead, noBody, 200, nil},
		{"POST /runs/{run_id}/cancel", "/runs/{live}/cancel", needWrite, form(""), 303, nil},
		{"POST /runs/{run_id}/retry", "/runs/{done}/retry", needTrust, form(""), 303, nil},
		{"POST /runs/{run_id}/approve", "/runs/{waiting}/approve", needWrite, form(""), 303, nil},
		{"POST /runs/{run_id}/reject", "/runs/{waiting}/reject", needWrite, form(""), 303, nil},
		{"GET /runs/{run_id}/jobs/{job_id}", "/runs/{done}/jobs/{doneJob}", needRead, noBody, 200, nil},
		{"GET /runs/{run_id}/jobs/{job_id}/log", "/runs/{done}/jobs/{doneJob}/log", needRead, noBody, 200, nil},
		{"GET /runs/{run_id}/jobs/{job_id}/steps", "/runs/{done}/jobs/{doneJob}/steps?times=1", needRead, noBody, 200, nil},
		{"GET /runs/{run_id}/jobs/{job_id}/raw", "/runs/{done}/jobs/{doneJob}/raw", needRead, noBody, 200, nil},
		{"GET /runs/{run_id}/jobs/{job_id}/artifacts/{name}", "/runs/{done}/jobs/{doneJob}/artifacts/report", needRead, noBody, 302, nil},
		{"POST /runs/{run_id}/jobs/{job_id}/cancel", "/runs/{live}/jobs/{liveJob}/cancel", needWrite, form(""), 303, nil},
		{"POST /runs/{run_id}/jobs/{job_id}/deployment/approve", "/runs/{deploying}/jobs/{shipJob}/deployment/approve", needWrite, form(""), 303, nil},
		{"POST /runs/{run_id}/jobs/{job_id}/deployment/reject", "/runs/{deploying}/jobs/{shipJob}/deployment/reject", needWrite, form("comment=no"), 303, nil},
		{"GET /projects/{project}/environments/{environment}", "/projects/{project}/environments/production", needRead, noBody, 200, nil},
		{"GET /projects", "/projects", needList, noBody, 200, projectName},
		{"POST /projects", "/projects", needGlobal, form("name=new%2Fproj"), 303, nil},
		{"GET /projects/{project}", "/projects/{project}", needRead, noBody, 200, nil},
		// The form reads the newest snapshot of the ref ForgeCI has (none
		// here: 404, for the writer only); the post records a delivery.
		{"GET /projects/{project}/run", "/projects/{project}/run", needWrite, noBody, 404, nil},
		{"POST /projects/{project}/run", "/projects/{project}/run", needWrite, form("ref=main"), 303, nil},
		{"POST /projects/{project}/members", "/projects/{project}/members", needAdmin, form("user=nina&role=read"), 303, nil},
		{"POST /projects/{project}/badges", "/projects/{project}/badges", needAdmin, form("public=on"), 303, nil},
		{"POST /projects/{project}/members/{user_id}/remove", "/projects/{project}/members/{reader}/remove", needAdmin, form(""), 303, nil},
		{"GET /runners", "/runners", needGlobal, noBody, 200, nil},
		{"POST /runners/{runner_id}/revoke", "/runners/{runner}/revoke", needGlobal, form(""), 303, nil},
	}
}

// public are the routes anyone may call: logging in and out, static files.
var public = map[string]bool{"GET /login": true, "POST /login": true, "POST /logout": true, "GET /static/{name}": true}

// TestTenancyMatrix: every user API route and dashboard page, called by a
// member with exactly the role it needs, a member with a lower role, a
// member of another project only, a user with no membership and a runner
// token. Only the first is served; the others are refused with the status
// their relation earns (403 for a lower role, 404 where they cannot even
// read the project, as if it did not exist, 401 or the login page for a
// runner token), and nothing is changed by a refused call. Lists are
// served to everyone, with only what each may read.
func TestTenancyMatrix(t *testing.T) {
	cases := tenancyCases()
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.route] = true
	}
	var missing []string
	for _, fn := range []string{"api", "ui"} {
		for _, r := range api.Routes(fn) {
			if key := r.Method + " " + r.Path; !covered[key] && !public[key] {
				missing = append(missing, key)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("routes not in the tenancy matrix: %v", missing)
	}
	for _, c := range cases {
		t.Run(c.route, func(t *testing.T) {
			t.Parallel()
			f := newTenancy(t)
			path := f.expand(c.path)
			body := c.body(f)
			before := f.state()
			for _, who := range f.refused(c) {
				status, out := f.call(strings.Fields(c.route)[0], path, who.token, body, c.page())
				if status != who.want || (c.marker != nil && strings.Contains(out, c.marker(f))) {
					t.Errorf("%s: %d, want %d (or it shows acme/app's %s)\n%.300s", who.name, status, who.want, "data", out)
				}
			}
			if after := f.state(); after != before {
				t.Errorf("refused calls changed something:\n%s", diff(before, after))
			}
			status, out := f.call(strings.Fields(c.route)[0], path, f.needed(c), body, c.page())
			if status != c.ok || (c.marker != nil && !strings.Contains(out, c.marker(f))) {
				t.Fatalf("a caller with the role it needs: %d, want %d\n%.500s", status, c.ok, out)
			}
		})
	}
}

// needed is the token of the caller with exactly the role c needs.
func (f *tenancy) needed(c tenancyCase) string {
	switch c.need {
	case needRead, needList, needAny:
		return f.readerA
	case needWrite:
		return f.writerA
	case needTrust:
		return f.trustedWriter
	case needAdmin:
		return f.adminA
	}
	return f.global
}

type refusal struct {
	name, token string
	want        int
}

// refused lists the callers c must not serve (or, for a list, serve only
// what they may read), with the status each must get.
func (f *tenancy) refused(c tenancyCase) []refusal {
	runner := http.StatusUnauthorized
	if c.page() && strings.HasPrefix(c.route, "GET") && !strings.HasSuffix(c.route, "/log") && !strings.HasSuffix(c.route, "/steps") {
		runner = http.StatusSeeOther // to the login page (the log feed is the script's: 401)
	}
	out := []refusal{{"runner token", f.runner.Token, runner}}
	switch c.need {
	case needList, needAny:
		return append(out, refusal{"member of another project", f.memberB, c.ok}, refusal{"no membership", f.nobody, c.ok})
	case needGlobal:
		return append(out, refusal{"project admin", f.adminA, 403}, refusal{"member of another project", f.memberB, 403},
			refusal{"no membership", f.nobody, 403})
	case needWrite:
		out = append(out, refusal{"reader", f.readerA, 403})
	case needTrust:
		out = append(out, refusal{"reader", f.readerA, 403}, refusal{"writer without the secrets permission", f.writerA, 403})
	case needAdmin:
		out = append(out, refusal{"writer", f.writerA, 403})
	}
	return append(out, refusal{"member of another project", f.memberB, 404}, refusal{"no membership", f.nobody, 404})
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// diff shows the lines of b that are not in a, and the other way round.
func diff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	am, bm := in(a), in(b)
	var out []string
	for l := range bm {
		if !am[l] {
			out = append(out, "+ "+l)
		}
	}
	for l := range am {
		if !bm[l] {
			out = append(out, "- "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
