// Package ui is ForgeCI's web dashboard: server-rendered pages (html/template
// escapes everything shown) and a little JavaScript to follow logs. It logs
// in with a user API token kept in an HttpOnly, SameSite=Strict cookie;
// state-changing forms also check the Origin header.
package ui

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

const cookieName = "forgeci_token"

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"short": func(s string) string {
		s = strings.TrimPrefix(s, "sha256:")
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"duration": func(start, end *time.Time) string {
		if start == nil {
			return ""
		}
		stop := time.Now()
		if end != nil {
			stop = *end
		}
		return stop.Sub(*start).Round(100 * time.Millisecond).String()
	},
	"join":  func(s []string) string { return strings.Join(s, ", ") },
	"deref": func(p *int) int { return *p },
}).ParseFS(templateFS, "templates/*.html"))

// UI serves the dashboard.
type UI struct {
	Store *store.Store
	Log   *slog.Logger
}

// Handler is a page handler of a logged-in user.
type Handler func(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error

type page struct {
	Title string
	User  store.User
	Error string
	Next  string // where the login page returns to
}

func (u *UI) render(w http.ResponseWriter, status int, name string, data any) {
	secureHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, data); err != nil && u.Log != nil {
		u.Log.Error("render", "page", name, "err", err)
	}
}

// secureHeaders: no inline script or style may run, nothing may frame us.
func secureHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "+
		"img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// Page wraps h: it needs a logged-in user with at least role; a visitor
// without a valid cookie is sent to the login page.
func (u *UI) Page(role string, h Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var user store.User
		c, err := r.Cookie(cookieName)
		if err == nil {
			user, err = u.Store.AuthenticateUser(r.Context(), c.Value)
		}
		if err != nil {
			if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/log") {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			u.fail(w, store.User{}, domain.Errorf(domain.EUnauthorized, "log in first"))
			return
		}
		if r.Method == http.MethodPost && !sameOrigin(r) {
			u.fail(w, user, domain.Errorf(domain.EForbidden, "cross-site form refused"))
			return
		}
		if !user.Can(role) {
			u.fail(w, user, domain.Errorf(domain.EForbidden, "this needs the %s role; you have %s", role, user.Role))
			return
		}
		if err := h(u, w, r, user); err != nil {
			u.fail(w, user, err)
		}
	}
}

// sameOrigin: a POST must come from our own pages. Browsers send Origin on
// every cross-site POST; the cookie is SameSite=Strict as well.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser, or a same-origin navigation that omitted it
	}
	o, err := url.Parse(origin)
	return err == nil && o.Host == r.Host
}

var statuses = map[string]int{domain.EUnauthorized: 401, domain.EForbidden: 403, domain.ENotFound: 404,
	domain.EInvalid: 400, domain.EConflict: 409}

func (u *UI) fail(w http.ResponseWriter, user store.User, err error) {
	status, ok := statuses[domain.ErrorCode(err)]
	msg := err.Error()
	var de *domain.Error
	if errors.As(err, &de) {
		msg = de.Message
	}
	if !ok {
		status, msg = http.StatusInternalServerError, "something went wrong; the error is in the function's log"
		if u.Log != nil {
			u.Log.Error("ui", "err", err)
		}
	}
	u.render(w, status, "error", page{Title: http.StatusText(status), User: user, Error: msg})
}

// LoginForm shows the login page.
func (u *UI) LoginForm(w http.ResponseWriter, r *http.Request) {
	u.render(w, http.StatusOK, "login", page{Title: "Log in", Next: localPath(r.URL.Query().Get("next"))})
}

// Login checks the token and sets the cookie.
func (u *UI) Login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if !sameOrigin(r) {
		u.fail(w, store.User{}, domain.Errorf(domain.EForbidden, "cross-site form refused"))
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if _, err := u.Store.AuthenticateUser(r.Context(), token); err != nil {
		u.render(w, http.StatusUnauthorized, "login", page{Title: "Log in", Next: localPath(r.URL.Query().Get("next")),
			Error: "That token is unknown, revoked or of a disabled user."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/", HttpOnly: true,
		Secure: secureRequest(r), SameSite: http.SameSiteStrictMode, MaxAge: 12 * 3600})
	next := localPath(r.URL.Query().Get("next"))
	if next == "" {
		next = "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// localPath keeps a return path only if it stays on this site.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return ""
	}
	return p
}

// Logout clears the cookie.
func (u *UI) Logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, Secure: secureRequest(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// secureRequest: behind API Gateway (HTTPS) the cookie is Secure; the local
// stack serves plain HTTP on loopback.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// Static serves the stylesheet and script.
func (u *UI) Static(w http.ResponseWriter, r *http.Request) {
	sub, _ := fs.Sub(staticFS, "static")
	name := r.PathValue("name")
	if strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "public, max-age=300")
	http.ServeFileFS(w, r, sub, name)
}

type runsPage struct {
	page
	Project  string
	Projects []store.Project
	Runs     []store.Run
	Next     string
}

// Runs lists runs, newest first.
func Runs(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	q := r.URL.Query()
	runs, err := u.Store.ListRuns(r.Context(), store.RunFilter{Project: q.Get("project"), Limit: 50, Before: q.Get("before")})
	if err != nil {
		return err
	}
	projects, err := u.Store.ListProjects(r.Context())
	if err != nil {
		return err
	}
	p := runsPage{page: page{Title: "Runs", User: user}, Project: q.Get("project"), Projects: projects, Runs: runs}
	if len(runs) == 50 {
		p.Next = runs[len(runs)-1].ID
	}
	u.render(w, http.StatusOK, "runs", p)
	return nil
}

type runPage struct {
	page
	Run      store.Run
	Stages   [][]store.JobInfo
	Terminal bool
	CanWrite bool
}

// Run shows a run and its job graph, stage by stage.
func Run(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	run, err := u.Store.GetRun(r.Context(), r.PathValue("run_id"))
	if err != nil {
		return err
	}
	jobs, err := u.Store.RunJobs(r.Context(), run.ID)
	if err != nil {
		return err
	}
	u.render(w, http.StatusOK, "run", runPage{page: page{Title: fmt.Sprintf("%s #%d", run.Project, run.Number), User: user},
		Run: run, Stages: stages(jobs), Terminal: store.IsTerminalRun(run.State), CanWrite: user.Can(store.RoleWrite)})
	return nil
}

// stages groups jobs by their depth in the needs graph.
func stages(jobs []store.JobInfo) [][]store.JobInfo {
	byName := map[string]store.JobInfo{}
	for _, j := range jobs {
		byName[j.Name] = j
	}
	depth := map[string]int{}
	var depthOf func(string, int) int
	depthOf = func(name string, guard int) int {
		if d, ok := depth[name]; ok || guard > len(jobs) {
			return d
		}
		d := 0
		for _, n := range byName[name].Needs {
			d = max(d, depthOf(n, guard+1)+1)
		}
		depth[name] = d
		return d
	}
	var out [][]store.JobInfo
	for _, j := range jobs {
		d := depthOf(j.Name, 0)
		for len(out) <= d {
			out = append(out, nil)
		}
		out[d] = append(out[d], j)
	}
	for _, s := range out {
		sort.SliceStable(s, func(a, b int) bool { return s[a].Name < s[b].Name })
	}
	return out
}

type jobPage struct {
	page
	Run         store.Run
	Job         store.JobDetail
	Generation  int
	JobTerminal bool
	CanWrite    bool
}

// Job shows a job's attempts and follows its log.
func Job(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	run, err := u.Store.GetRun(r.Context(), r.PathValue("run_id"))
	if err != nil {
		return err
	}
	job, err := u.Store.GetJob(r.Context(), run.ID, r.PathValue("job_id"))
	if err != nil {
		return err
	}
	gen, _ := strconv.Atoi(r.URL.Query().Get("generation"))
	u.render(w, http.StatusOK, "job", jobPage{page: page{Title: job.Name, User: user}, Run: run, Job: job,
		Generation: gen, JobTerminal: domain.JobTerminal(job.State), CanWrite: user.Can(store.RoleWrite)})
	return nil
}

// JobLog returns raw log bytes from ?offset= for the dashboard's script,
// with the job's state, so it knows when to stop following.
func JobLog(u *UI, w http.ResponseWriter, r *http.Request, _ store.User) error {
	offset, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil || offset < 0 {
		offset = 0
	}
	gen, _ := strconv.Atoi(r.URL.Query().Get("generation"))
	job, err := u.Store.GetJob(r.Context(), r.PathValue("run_id"), r.PathValue("job_id"))
	if err != nil {
		return err
	}
	data, _, err := u.Store.ReadLog(r.Context(), job.RunID, job.ID, gen, offset, 256<<10)
	if err != nil {
		return err
	}
	secureHeaders(w)
	// Bytes, never HTML: the script inserts them as text.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Next-Offset", strconv.FormatInt(offset+int64(len(data)), 10))
	w.Header().Set("X-Job-State", job.State)
	_, _ = w.Write(data)
	return nil
}

// Cancel cancels a run or a job and goes back to its page.
func Cancel(u *UI, w http.ResponseWriter, r *http.Request, _ store.User) error {
	if _, _, err := u.Store.Cancel(r.Context(), r.PathValue("run_id"), r.PathValue("job_id")); err != nil {
		return err
	}
	back := "/runs/" + url.PathEscape(r.PathValue("run_id"))
	if id := r.PathValue("job_id"); id != "" {
		back += "/jobs/" + url.PathEscape(id)
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
	return nil
}

// Retry makes a new run of a finished one and opens it.
func Retry(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	run, err := u.Store.Retry(r.Context(), r.PathValue("run_id"), "", user.Name)
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
	return nil
}

type runnersPage struct {
	page
	Runners []store.RunnerInfo
	IsAdmin bool
}

// Runners lists runners; admins may revoke them.
func Runners(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	rs, err := u.Store.ListRunners(r.Context())
	if err != nil {
		return err
	}
	u.render(w, http.StatusOK, "runners", runnersPage{page: page{Title: "Runners", User: user}, Runners: rs,
		IsAdmin: user.Can(store.RoleAdmin)})
	return nil
}

// RevokeRunner revokes a runner (admins).
func RevokeRunner(u *UI, w http.ResponseWriter, r *http.Request, _ store.User) error {
	if err := u.Store.RevokeRunner(r.Context(), r.PathValue("runner_id")); err != nil {
		return err
	}
	http.Redirect(w, r, "/runners", http.StatusSeeOther)
	return nil
}
