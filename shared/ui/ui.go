// Package ui is ForgeCI's web dashboard: server-rendered pages (render.go
// escapes everything shown) and a little JavaScript to follow logs. It logs
// in with a user API token kept in an HttpOnly, SameSite=Strict cookie;
// state-changing forms also check the Origin header.
package ui

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

//go:embed static
var staticFS embed.FS

// The session cookie's name: over HTTPS with the __Host- prefix, which the
// browser keeps to this host and path / and sets only when Secure, so a
// sibling subdomain or a plain-HTTP response cannot plant one; the local
// stack serves plain HTTP on loopback, where the prefix cannot be had.
const cookieName, secureCookieName = "forgeci_session", "__Host-forgeci_session"

func sessionCookie(r *http.Request) string {
	if secureRequest(r) {
		return secureCookieName
	}
	return cookieName
}

// UI serves the dashboard.
type UI struct {
	Store *store.Store
	Log   *slog.Logger
	// Runs makes manual runs.
	Runs Dispatcher
}

// Handler is a page handler of a logged-in user.
type Handler func(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error

type page struct {
	Title string
	User  store.User
	Error string
	// Details locate each problem of an invalid pipeline file.
	Details []domain.Detail
	Next    string // where the login page returns to
}

func (u *UI) render(w http.ResponseWriter, status int, name string, data any) {
	var o out
	if err := writePage(&o, name, data); err != nil {
		if u.Log != nil {
			u.Log.Error("render", "page", name, "err", err)
		}
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	secureHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, o.String())
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

// Page wraps h: it needs a logged-in user (a global admin if adminOnly);
// a visitor without a valid cookie is sent to the login page. What a user
// may see or change in a project the store decides, as for the API.
func (u *UI) Page(adminOnly bool, h Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var user store.User
		c, err := r.Cookie(sessionCookie(r))
		if err == nil {
			user, err = u.Store.AuthenticateSession(r.Context(), c.Value)
		}
		if err != nil {
			if r.Method == http.MethodGet && !scriptFeed(r.URL.Path) {
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
		if adminOnly && !user.IsAdmin() {
			u.fail(w, user, domain.Errorf(domain.EForbidden, "only global admins may see this"))
			return
		}
		if err := h(u, w, r, user); err != nil {
			u.fail(w, user, err)
		}
	}
}

// sameOrigin: a POST must come from our own pages (scheme and host).
// Browsers send Origin on every cross-site POST, and those that omit it
// send Sec-Fetch-Site; the cookie is SameSite=Strict as well.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		// Not a browser, or one that says where the request comes from here.
		site := r.Header.Get("Sec-Fetch-Site")
		return site == "" || site == "same-origin" || site == "none"
	}
	o, err := url.Parse(origin)
	scheme := "http"
	if secureRequest(r) {
		scheme = "https"
	}
	return err == nil && o.Host == r.Host && o.Scheme == scheme
}

// fail shows an error page with the status the API would answer (one
// table, in package protocol); an error that is not a *domain.Error is
// internal and its text goes to the log only, unless it is a value
// PostgreSQL refused for its bytes: the user's mistake (as for the API).
func (u *UI) fail(w http.ResponseWriter, user store.User, err error) {
	var de *domain.Error
	if !errors.As(err, &de) {
		if ie := store.InputError(err); ie != nil {
			if u.Log != nil {
				u.Log.Warn("ui: a value the database refused", "err", err)
			}
			err = ie
		}
	}
	if !errors.As(err, &de) || de.Code == domain.EInternal {
		if u.Log != nil {
			u.Log.Error("ui", "err", err)
		}
		de = domain.Errorf(domain.EInternal, "something went wrong; the error is in the function's log")
	}
	status := protocol.StatusOf(de.Code)
	u.render(w, status, "error", page{Title: http.StatusText(status), User: user, Error: de.Message, Details: de.Details})
}

// LoginForm shows the login page.
func (u *UI) LoginForm(w http.ResponseWriter, r *http.Request) {
	u.render(w, http.StatusOK, "login", page{Title: "Log in", Next: localPath(r.URL.Query().Get("next"))})
}

// readForm reads a form body of at most limit bytes. A body too large, a
// form that does not parse, or a field that holds a NUL byte or invalid
// UTF-8 (PostgreSQL's text holds neither) is the user's error.
func readForm(w http.ResponseWriter, r *http.Request, limit int64) (url.Values, error) {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, domain.Errorf(domain.ETooLarge, "the form is over the limit of %d bytes", limit)
		}
		return nil, domain.Errorf(domain.EInvalid, "the form could not be read: %v", err)
	}
	for name, values := range r.PostForm {
		if err := store.CheckText("a form field's name", name); err != nil {
			return nil, err
		}
		for _, v := range values {
			if err := store.CheckText(fmt.Sprintf("form field %q", name), v); err != nil {
				return nil, err
			}
		}
	}
	return r.PostForm, nil
}

// Login checks the token and sets the cookie.
func (u *UI) Login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		u.fail(w, store.User{}, domain.Errorf(domain.EForbidden, "cross-site form refused"))
		return
	}
	form, err := readForm(w, r, 4096)
	if err != nil {
		u.fail(w, store.User{}, err)
		return
	}
	token := strings.TrimSpace(form.Get("token"))
	session, _, err := u.Store.OpenSession(r.Context(), token)
	if err != nil {
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != domain.EUnauthorized {
			u.fail(w, store.User{}, err)
			return
		}
		u.render(w, http.StatusUnauthorized, "login", page{Title: "Log in", Next: localPath(r.URL.Query().Get("next")),
			Error: "That token is unknown, revoked, expired or of a disabled user."})
		return
	}
	// The cookie holds the session's secret, never the token: a copied
	// cookie is no API credential, and it ends with the session.
	setCookie(w, r, sessionCookie(r), session, int(store.SessionTTL.Seconds()))
	clearOldCookie(w, r)
	next := localPath(r.URL.Query().Get("next"))
	if next == "" {
		next = "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// localPath keeps a return path only if it is a path on this site: it is
// parsed, has no scheme, host or user, starts with one "/" followed by
// something other than "/" or "\\", and holds no control character or
// backslash (browsers drop tabs and newlines and read "\\" as "/", so
// "/\t/evil.example" would become "//evil.example"). Anything else is "".
func localPath(p string) string {
	if p == "" || len(p) > 2048 || strings.ContainsAny(p, "\\") {
		return ""
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return ""
		}
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") || strings.HasPrefix(p, "//") {
		return ""
	}
	return u.RequestURI()
}

// Logout ends the session and clears the cookie; another site's form
// cannot sign a user out.
func (u *UI) Logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		u.fail(w, store.User{}, domain.Errorf(domain.EForbidden, "cross-site form refused"))
		return
	}
	if c, err := r.Cookie(sessionCookie(r)); err == nil {
		if err := u.Store.CloseSession(r.Context(), c.Value); err != nil {
			u.fail(w, store.User{}, err)
			return
		}
	}
	setCookie(w, r, sessionCookie(r), "", -1)
	clearOldCookie(w, r)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// clearOldCookie expires the cookie of dashboards before sessions, which
// held the API token itself.
func clearOldCookie(w http.ResponseWriter, r *http.Request) {
	if _, err := r.Cookie("forgeci_token"); err == nil {
		setCookie(w, r, "forgeci_token", "", -1)
	}
}

// setCookie sets the dashboard's cookie name (maxAge -1: expires it),
// HttpOnly and SameSite=Strict, Secure behind HTTPS.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, Secure: secureRequest(r),
		SameSite: http.SameSiteStrictMode, MaxAge: maxAge})
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

// humanBytes writes a byte count the way people read it (1.5 GiB).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
