package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// Server holds what the handlers need.
type Server struct {
	Store *store.Store
	CAS   *cas.Store
	Log   *slog.Logger
	// WebhookSecret is the GitHub App's webhook secret (optional: webhooks
	// of single repositories use the secret registered with them).
	WebhookSecret []byte
	// IDTokens issues identity tokens (nil: none are issued).
	IDTokens TokenIssuer
	// OnDelivery, when set, is called after a new webhook delivery is
	// recorded, to wake the scm worker. It must not block for long.
	OnDelivery func(ctx context.Context) error
	// Polls shape idle polls of runners (claimpoll.go).
	Polls Polls
}

// Route is one HTTP route of one Lambda function.
type Route struct {
	Method string
	Path   string // net/http pattern syntax; also the API Gateway route
}

type route struct {
	Route
	handler func(s *Server) http.HandlerFunc
}

// Function is one HTTP Lambda function (functions/<name>) and its routes.
// template.yaml must list exactly these; a test holds them together.
type Function struct {
	Name   string
	routes func() []route
	// refuse answers a request refused before its route's handler, in the
	// function's style; nil is the API's JSON error.
	refuse Refusal
}

// Refusal answers a request refused before its route's handler ran.
type Refusal func(s *Server, w http.ResponseWriter, r *http.Request, err error)

// The HTTP functions. A bootstrap serves its own (Server.Serve), so that
// the linker keeps only that function's handlers and what they use; the
// table of them all (builtin: Handler, Routes) is for the local stack and
// tests, and would keep every handler in every bootstrap.
var (
	RegisterFunction = Function{Name: "register", routes: func() []route {
		return []route{
			{Route{"POST", protocol.PathRegister}, func(s *Server) http.HandlerFunc { return s.handle(s.register) }},
		}
	}}
	ClaimFunction = Function{Name: "claim", routes: func() []route {
		return []route{
			{Route{"POST", protocol.PathClaim}, func(s *Server) http.HandlerFunc { return s.handle(s.claimRoute) }},
		}
	}}
	HeartbeatFunction = Function{Name: "heartbeat", routes: func() []route {
		return []route{
			{jobRoute(protocol.RouteHeartbeat), leasedRoute(maxBody, http.StatusOK, (*Server).heartbeat)},
		}
	}}
	SourceFunction = Function{Name: "source", routes: func() []route {
		return []route{
			{jobRoute(protocol.RouteSource), leasedRoute(maxBody, http.StatusOK, (*Server).source)},
		}
	}}
	LogsFunction = Function{Name: "logs", routes: func() []route {
		return []route{
			{jobRoute(protocol.RouteLogs), leasedRoute(maxLogBody, http.StatusOK, (*Server).logs)},
		}
	}}
	ArtifactsFunction = Function{Name: "artifacts", routes: func() []route {
		return []route{
			{jobRoute(protocol.RouteArtifacts), leasedRoute(maxBody, http.StatusOK, (*Server).artifactUpload)},
			{jobRoute(protocol.RouteArtifactCommit), leasedRoute(maxBody, http.StatusCreated, (*Server).artifactCommit)},
			{jobRoute(protocol.RouteArtifactFetch), leasedRoute(maxBody, http.StatusOK, (*Server).artifactFetch)},
		}
	}}
	CacheFunction = Function{Name: "cache", routes: func() []route {
		return []route{
			{jobRoute(protocol.RouteCacheRestore), leasedRoute(maxBody, http.StatusOK, (*Server).cacheRestore)},
			{jobRoute(protocol.RouteCacheSave), leasedRoute(maxBody, http.StatusOK, (*Server).cacheSave)},
			{jobRoute(protocol.RouteCacheCommit), leasedRoute(maxBody, http.StatusCreated, (*Server).cacheCommit)},
		}
	}}
	// The user API: what the CLI and dashboard use. anyUser routes are
	// authorised by the store against the project of what they touch.
	APIFunction = Function{Name: "api", routes: func() []route {
		return []route{
			{Route{"POST", "/v1/uploads"}, userRoute(anyUser, (*Server).createUpload)},
			{Route{"POST", "/v1/runs"}, userRoute(anyUser, (*Server).createRun)},
			{Route{"POST", "/v1/projects/{project}/dispatch"}, userRoute(anyUser, (*Server).dispatch)},
			{Route{"GET", "/v1/runs/{run_id}"}, userRoute(anyUser, (*Server).getRun)},
			{Route{"GET", "/v1/runs/{run_id}/jobs/{job_id}/logs"}, userRoute(anyUser, (*Server).getLog)},
			{Route{"GET", "/v1/runs/{run_id}/jobs/{job_id}/steps"}, userRoute(anyUser, (*Server).getLogIndex)},
			{Route{"GET", "/v1/runs/{run_id}/jobs/{job_id}/report"}, userRoute(anyUser, (*Server).getReport)},
			{Route{"GET", "/v1/projects/{project}/badge.svg"}, func(s *Server) http.HandlerFunc { return s.badge }},
			{Route{"GET", "/v1/queue"}, userRoute(anyUser, (*Server).queue)},
			{Route{"POST", "/v1/projects/{project}/hooks"}, userRoute(anyUser, (*Server).addHook)},
			{Route{"GET", "/v1/projects/{project}/hooks"}, userRoute(anyUser, (*Server).listHooks)},
			{Route{"POST", "/v1/projects/{project}/hooks/{hook_id}/delete"}, userRoute(anyUser, (*Server).deleteHook)},
			{Route{"GET", "/v1/projects/{project}/notifications"}, userRoute(anyUser, (*Server).listNotifications)},
			{Route{"GET", "/v1/runs/{run_id}/artifacts"}, userRoute(anyUser, (*Server).listArtifacts)},
			{Route{"GET", "/v1/runs/{run_id}/jobs/{job_id}/artifacts/{name}"}, userRoute(anyUser, (*Server).downloadArtifact)},
			{Route{"POST", "/v1/runs/{run_id}/cancel"}, userRoute(anyUser, (*Server).cancel)},
			{Route{"POST", "/v1/runs/{run_id}/jobs/{job_id}/cancel"}, userRoute(anyUser, (*Server).cancel)},
			{Route{"POST", "/v1/runs/{run_id}/approve"}, userRoute(anyUser, (*Server).approve)},
			{Route{"POST", "/v1/runs/{run_id}/reject"}, userRoute(anyUser, (*Server).reject)},
			{Route{"GET", "/v1/projects"}, userRoute(anyUser, (*Server).listProjects)},
			{Route{"POST", "/v1/projects"}, userRoute(adminOnly, (*Server).createProject)},
			{Route{"GET", "/v1/projects/{project}"}, userRoute(anyUser, (*Server).getProject)},
			{Route{"GET", "/v1/projects/{project}/members"}, userRoute(anyUser, (*Server).listMembers)},
			{Route{"POST", "/v1/projects/{project}/members"}, userRoute(anyUser, (*Server).setMember)},
			{Route{"POST", "/v1/projects/{project}/members/{user_id}/remove"}, userRoute(anyUser, (*Server).removeMember)},
			{Route{"GET", "/v1/projects/{project}/secrets"}, userRoute(anyUser, (*Server).listSecrets)},
			{Route{"POST", "/v1/projects/{project}/secrets"}, userRoute(anyUser, (*Server).setSecret)},
			{Route{"POST", "/v1/projects/{project}/secrets/{name}/delete"}, userRoute(anyUser, (*Server).deleteSecret)},
			{Route{"GET", "/v1/projects/{project}/variables"}, userRoute(anyUser, (*Server).listVariables)},
			{Route{"POST", "/v1/projects/{project}/variables"}, userRoute(anyUser, (*Server).setVariable)},
			{Route{"POST", "/v1/projects/{project}/variables/{name}/delete"}, userRoute(anyUser, (*Server).deleteVariable)},
			{Route{"GET", "/v1/projects/{project}/environments"}, userRoute(anyUser, (*Server).listEnvironments)},
			{Route{"POST", "/v1/projects/{project}/environments/{environment}"}, userRoute(anyUser, (*Server).setEnvironment)},
			{Route{"POST", "/v1/projects/{project}/environments/{environment}/delete"}, userRoute(anyUser, (*Server).deleteEnvironment)},
			{Route{"GET", "/v1/projects/{project}/deployments"}, userRoute(anyUser, (*Server).listDeployments)},
			{Route{"POST", "/v1/runs/{run_id}/jobs/{job_id}/deployment/approve"}, userRoute(anyUser, (*Server).approveDeployment)},
			{Route{"POST", "/v1/runs/{run_id}/jobs/{job_id}/deployment/reject"}, userRoute(anyUser, (*Server).rejectDeployment)},
			{Route{"GET", "/v1/projects/{project}/storage"}, userRoute(anyUser, (*Server).getStorage)},
			{Route{"POST", "/v1/projects/{project}/settings"}, userRoute(anyUser, (*Server).setSettings)},
			{Route{"GET", "/v1/gc"}, userRoute(adminOnly, (*Server).gcPlan)},
			{Route{"GET", "/v1/runs"}, userRoute(anyUser, (*Server).listRuns)},
			{Route{"GET", "/v1/runs/{run_id}/jobs/{job_id}"}, userRoute(anyUser, (*Server).getJob)},
			{Route{"POST", "/v1/runs/{run_id}/retry"}, userRoute(anyUser, (*Server).retry)},
			{Route{"POST", "/v1/runs/{run_id}/jobs/{job_id}/retry"}, userRoute(anyUser, (*Server).retry)},
			{Route{"GET", "/v1/me"}, userRoute(anyUser, (*Server).whoami)},
			// Runners serve every project until runners are scoped to
			// projects: only global admins see and manage them.
			{Route{"GET", "/v1/runners"}, userRoute(adminOnly, (*Server).listRunners)},
			{Route{"POST", "/v1/runners/{runner_id}/revoke"}, userRoute(adminOnly, (*Server).revokeRunner)},
			{Route{"POST", "/v1/registration-tokens"}, userRoute(adminOnly, (*Server).createRegistrationToken)},
			{Route{"GET", "/v1/registration-tokens"}, userRoute(adminOnly, (*Server).listRegistrationTokens)},
			{Route{"POST", "/v1/registration-tokens/{token_id}/revoke"}, userRoute(adminOnly, (*Server).revokeRegistrationToken)},
			{Route{"GET", "/v1/users"}, userRoute(adminOnly, (*Server).listUsers)},
			{Route{"POST", "/v1/users"}, userRoute(adminOnly, (*Server).createUser)},
			{Route{"POST", "/v1/users/{user_id}/tokens"}, userRoute(anyUser, (*Server).createUserToken)},
			{Route{"GET", "/v1/users/{user_id}/tokens"}, userRoute(anyUser, (*Server).listUserTokens)},
			{Route{"POST", "/v1/users/{user_id}/tokens/{token_id}/revoke"}, userRoute(anyUser, (*Server).revokeUserToken)},
			{Route{"POST", "/v1/users/{user_id}/disable"}, userRoute(adminOnly, (*Server).disableUser)},
			{Route{"GET", "/v1/deliveries"}, userRoute(anyUser, (*Server).listDeliveries)},
			{Route{"POST", "/v1/deliveries/{guid}/retry"}, userRoute(anyUser, (*Server).retryDelivery)},
		}
	}}
	// Identity tokens: the fenced runner route and the public issuer's.
	OIDCFunction = Function{Name: "oidc", routes: func() []route {
		return []route{
			{jobRoute(protocol.RouteIDToken), leasedRoute(maxBody, http.StatusOK, (*Server).idToken)},
			{Route{"GET", protocol.PathDiscovery}, func(s *Server) http.HandlerFunc { return s.handle(s.discovery) }},
			{Route{"GET", protocol.PathJWKS}, func(s *Server) http.HandlerFunc { return s.handle(s.jwks) }},
			{Route{"POST", protocol.PathIntrospect}, func(s *Server) http.HandlerFunc { return s.handle(s.introspect) }},
		}
	}}
	WebhookFunction = Function{Name: "webhook", routes: func() []route {
		return []route{
			{Route{"POST", "/v1/webhooks/github"}, func(s *Server) http.HandlerFunc { return s.handle(s.githubWebhook) }},
		}
	}}
	CompleteFunction = Function{Name: "complete", routes: func() []route {
		return []route{
			{jobRoute(protocol.RouteComplete), leasedRoute(maxBody, http.StatusOK, (*Server).complete)},
			{jobRoute(protocol.RouteOutputs), leasedRoute(protocol.MaxOutputsBody, http.StatusOK, (*Server).outputs)},
			{jobRoute(protocol.RouteReport), leasedRoute(protocol.MaxReportBody, http.StatusOK, (*Server).report)},
		}
	}}
)

// builtin is every function of this package.
func builtin() []Function {
	return []Function{RegisterFunction, ClaimFunction, HeartbeatFunction, SourceFunction, LogsFunction, ArtifactsFunction,
		CacheFunction, APIFunction, OIDCFunction, WebhookFunction, CompleteFunction}
}

// RouteHandler is a route with the handler the Server gives it.
type RouteHandler struct {
	Route
	Handler func(s *Server) http.HandlerFunc
}

// Register adds a function defined in another package. The dashboard
// registers itself (package ui, imported by functions/ui and the local
// stack), so that its pages are only in the ui bootstrap. refuse answers
// its requests refused at the edge (nil: the JSON error).
func Register(function string, refuse Refusal, routes ...RouteHandler) {
	rs := make([]route, len(routes))
	for i, r := range routes {
		rs[i] = route{r.Route, r.Handler}
	}
	registered = append(registered, Function{Name: function, routes: func() []route { return rs }, refuse: refuse})
}

// registered are the functions other packages registered.
var registered []Function

// Registered is a function another package registered (its bootstrap's
// way to name it).
func Registered(function string) Function {
	for _, f := range registered {
		if f.Name == function {
			return f
		}
	}
	panic("api: no function " + function + " is registered")
}

// all is every function, registered ones included.
func all() []Function { return append(builtin(), registered...) }

// Who may call a user route before the store's own checks.
const (
	anyUser   = false // any authenticated user
	adminOnly = true  // global admins
)

func userRoute(admin bool, h func(s *Server, w http.ResponseWriter, r *http.Request, u store.User) error) func(s *Server) http.HandlerFunc {
	return func(s *Server) http.HandlerFunc {
		return s.asUser(admin, func(w http.ResponseWriter, r *http.Request, u store.User) error { return h(s, w, r, u) })
	}
}

// jobRoute is the route of a job-scoped runner request.
func jobRoute(name string) Route { return Route{"POST", protocol.JobPattern(name)} }

// Functions returns the names of the HTTP functions, sorted.
func Functions() []string {
	var names []string
	for _, f := range all() {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return names
}

// Routes returns the routes of one function.
func Routes(function string) []Route {
	var out []Route
	for _, f := range all() {
		if f.Name != function {
			continue
		}
		for _, r := range f.routes() {
			out = append(out, r.Route)
		}
	}
	return out
}

// Handler returns a handler serving the routes of the named functions (all
// of them when none is named): the local stack serves them all in one
// process, with the same handlers as the bootstraps.
func (s *Server) Handler(names ...string) http.Handler {
	var fns []Function
	for _, f := range all() {
		if len(names) == 0 || slices.Contains(names, f.Name) {
			fns = append(fns, f)
		}
	}
	return s.Serve(fns...)
}

// Serve returns a handler serving the routes of fns: a bootstrap's.
func (s *Server) Serve(fns ...Function) http.Handler {
	if s.Log == nil {
		s.Log = slog.Default()
	}
	mux := http.NewServeMux()
	refusals := map[string]Refusal{} // by the mux's pattern
	for _, f := range fns {
		for _, r := range f.routes() {
			path := r.Path
			if path == "/" {
				path = "/{$}" // only the root, not every path (API Gateway's "/" is exact)
			}
			mux.Handle(r.Method+" "+path, r.handler(s))
			if f.refuse != nil {
				refusals[r.Method+" "+path] = f.refuse
			}
		}
	}
	return edge(mux, refusals, s)
}

// edge checks what every route reads before any handler: a path or query
// parameter holding a NUL byte or invalid UTF-8 is refused (PostgreSQL's
// text holds neither, and a handler would pass it on), in the style of
// the route's function. Requests no route matches get the error envelope
// rather than the mux's plain-text page.
func edge(mux *http.ServeMux, refusals map[string]Refusal, s *Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		if err := checkURL(r); err != nil {
			if refuse := refusals[pattern]; refuse != nil {
				refuse(s, w, r, err)
			} else {
				writeError(w, r, s.Log, err)
			}
			return
		}
		if pattern == "" {
			writeError(w, r, s.Log, domain.Errorf(domain.ENotFound, "no route for %s %s", r.Method, r.URL.Path))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// checkURL refuses a request whose path (so any path value) or query
// parameter, name or value, holds a NUL byte or invalid UTF-8.
func checkURL(r *http.Request) error {
	if err := store.CheckText("the path", r.URL.Path); err != nil {
		return err
	}
	for name, values := range r.URL.Query() {
		if err := store.CheckText("a query parameter's name", name); err != nil {
			return err
		}
		for _, v := range values {
			if err := store.CheckText(fmt.Sprintf("query parameter %q", name), v); err != nil {
				return err
			}
		}
	}
	return nil
}
