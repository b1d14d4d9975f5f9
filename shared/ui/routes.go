package ui

import (
	"net/http"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/store"
)

// The dashboard's routes join the routes table of package api (and so
// template.yaml's UiFunction) when this package is imported.
func init() {
	ui := func(s *api.Server) *UI { return &UI{Store: s.Store, Log: s.Log} }
	page := func(role string, h Handler) func(s *api.Server) http.HandlerFunc {
		return func(s *api.Server) http.HandlerFunc { return ui(s).Page(role, h) }
	}
	api.Register("ui",
		api.RouteHandler{Route: api.Route{Method: "GET", Path: "/"}, Handler: page(store.RoleRead, Runs)},
		api.RouteHandler{Route: api.Route{Method: "GET", Path: "/login"}, Handler: func(s *api.Server) http.HandlerFunc { return ui(s).LoginForm }},
		api.RouteHandler{Route: api.Route{Method: "POST", Path: "/login"}, Handler: func(s *api.Server) http.HandlerFunc { return ui(s).Login }},
		api.RouteHandler{Route: api.Route{Method: "POST", Path: "/logout"}, Handler: func(s *api.Server) http.HandlerFunc { return ui(s).Logout }},
		api.RouteHandler{Route: api.Route{Method: "GET", Path: "/static/{name}"}, Handler: func(s *api.Server) http.HandlerFunc { return ui(s).Static }},
		api.RouteHandler{Route: api.Route{Method: "GET", Path: "/runs/{run_id}"}, Handler: page(store.RoleRead, Run)},
		api.RouteHandler{Route: api.Route{Method: "POST", Path: "/runs/{run_id}/cancel"}, Handler: page(store.RoleWrite, Cancel)},
		api.RouteHandler{Route: api.Route{Method: "POST", Path: "/runs/{run_id}/retry"}, Handler: page(store.RoleWrite, Retry)},
		api.RouteHandler{Route: api.Route{Method: "GET", Path: "/runs/{run_id}/jobs/{job_id}"}, Handler: page(store.RoleRead, Job)},
		api.RouteHandler{Route: api.Route{Method: "GET", Path: "/runs/{run_id}/jobs/{job_id}/log"}, Handler: page(store.RoleRead, JobLog)},
		api.RouteHandler{Route: api.Route{Method: "POST", Path: "/runs/{run_id}/jobs/{job_id}/cancel"}, Handler: page(store.RoleWrite, Cancel)},
		api.RouteHandler{Route: api.Route{Method: "GET", Path: "/runners"}, Handler: page(store.RoleRead, Runners)},
		api.RouteHandler{Route: api.Route{Method: "POST", Path: "/runners/{runner_id}/revoke"}, Handler: page(store.RoleAdmin, RevokeRunner)},
	)
}
