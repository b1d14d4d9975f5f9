package ui

import (
	"net/http"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/store"
)

// The dashboard's routes join the routes table of package api (and so
// template.yaml's UiFunction) when this package is imported.
func init() {
	ui := func(s *api.Server) *UI { return &UI{Store: s.Store, Log: s.Log, Runs: s} }
	// anyUser pages are authorised by the store against the project of
	// what they show or change; adminOnly pages need a global admin.
	const anyUser, adminOnly = false, true
	page := func(admin bool, h Handler) func(s *api.Server) http.HandlerFunc {
		return func(s *api.Server) http.HandlerFunc { return ui(s).Page(admin, h) }
	}
	plain := func(h func(u *UI) http.HandlerFunc) func(s *api.Server) http.HandlerFunc {
		return func(s *api.Server) http.HandlerFunc { return h(ui(s)) }
	}
	route := func(method, path string, h func(s *api.Server) http.HandlerFunc) api.RouteHandler {
		return api.RouteHandler{Route: api.Route{Method: method, Path: path}, Handler: func(s *api.Server) http.HandlerFunc {
			inner := h(s)
			return func(w http.ResponseWriter, r *http.Request) {
				if secureRequest(r) { // browsers keep to HTTPS here from then on
					w.Header().Set("Strict-Transport-Security", "max-age=31536000")
				}
				inner(w, r)
			}
		}}
	}
	// A request refused at the edge (bad bytes in its path or query) is
	// answered with the error page.
	refuse := func(s *api.Server, w http.ResponseWriter, r *http.Request, err error) {
		ui(s).fail(w, store.User{}, err)
	}
	api.Register("ui", refuse,
		route("GET", "/", page(anyUser, Runs)),
		route("GET", "/login", plain(func(u *UI) http.HandlerFunc { return u.LoginForm })),
		route("POST", "/login", plain(func(u *UI) http.HandlerFunc { return u.Login })),
		route("POST", "/logout", plain(func(u *UI) http.HandlerFunc { return u.Logout })),
		route("GET", "/static/{name}", plain(func(u *UI) http.HandlerFunc { return u.Static })),
		route("GET", "/runs/{run_id}", page(anyUser, Run)),
		route("GET", "/queue", page(anyUser, Queue)),
		route("POST", "/runs/{run_id}/cancel", page(anyUser, Cancel)),
		route("POST", "/runs/{run_id}/retry", page(anyUser, Retry)),
		route("POST", "/runs/{run_id}/approve", page(anyUser, Approve)),
		route("POST", "/runs/{run_id}/reject", page(anyUser, Reject)),
		route("GET", "/runs/{run_id}/jobs/{job_id}", page(anyUser, Job)),
		route("GET", "/runs/{run_id}/jobs/{job_id}/log", page(anyUser, JobLog)),
		route("GET", "/runs/{run_id}/jobs/{job_id}/steps", page(anyUser, JobSteps)),
		route("GET", "/runs/{run_id}/jobs/{job_id}/raw", page(anyUser, JobRaw)),
		route("GET", "/runs/{run_id}/jobs/{job_id}/artifacts/{name}", page(anyUser, Artifact)),
		route("POST", "/runs/{run_id}/jobs/{job_id}/cancel", page(anyUser, Cancel)),
		route("POST", "/runs/{run_id}/jobs/{job_id}/deployment/approve", page(anyUser, ApproveDeployment)),
		route("POST", "/runs/{run_id}/jobs/{job_id}/deployment/reject", page(anyUser, RejectDeployment)),
		route("GET", "/projects", page(anyUser, Projects)),
		route("POST", "/projects", page(adminOnly, CreateProject)),
		route("GET", "/projects/{project}", page(anyUser, Project)),
		route("GET", "/projects/{project}/run", page(anyUser, DispatchForm)),
		route("GET", "/projects/{project}/environments/{environment}", page(anyUser, Environment)),
		route("POST", "/projects/{project}/run", page(anyUser, DispatchRun)),
		route("POST", "/projects/{project}/members", page(anyUser, SetMember)),
		route("POST", "/projects/{project}/badges", page(anyUser, SetBadges)),
		route("POST", "/projects/{project}/members/{user_id}/remove", page(anyUser, RemoveMember)),
		route("GET", "/runners", page(adminOnly, Runners)),
		route("POST", "/runners/{runner_id}/revoke", page(adminOnly, RevokeRunner)),
	)
}
