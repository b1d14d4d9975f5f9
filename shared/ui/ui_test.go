package ui_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestPages: visitors are sent to the login page; a read-only user sees
// runs but cannot cancel or revoke (no button, and 403 if forced); a POST
// from another origin is refused; everything shown is escaped.
func TestPages(t *testing.T) {
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{})
	srv := httptest.NewServer((&api.Server{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler("ui"))
	defer srv.Close()
	project := pgtest.Project(t, st, "acme")
	member := func(name, role string) string {
		u, token, err := st.CreateUser(ctx, name, store.RoleUser)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Pool().Exec(ctx, `INSERT INTO project_members (project_id, user_id, role) VALUES ($1, $2, $3)`,
			project.ID, u.ID, role); err != nil {
			t.Fatal(err)
		}
		return token
	}
	reader, writer := member("viewer", store.RoleRead), member("dev", store.RoleWrite)
	run, err := st.CreateRun(ctx, store.NewRun{Project: "acme", Trigger: `<script>alert(1)</script>`, GitRef: `"><b>x`,
		Jobs: []store.NewJob{{Name: "build", Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path, token string) (int, string, http.Header) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if token != "" {
			req.AddCookie(pgtest.SessionCookie(t, st, token))
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	post := func(path, token, origin string) int {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(""))
		req.AddCookie(pgtest.SessionCookie(t, st, token))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	if code, _, h := get("/runs/"+run.ID, ""); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/login?next=") {
		t.Fatalf("visitor: %d %s", code, h.Get("Location"))
	}
	code, body, h := get("/", reader)
	if code != 200 || strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("runs page: %d\n%s", code, body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Fatalf("CSP %q", csp)
	}
	code, body, _ = get("/runs/"+run.ID, reader)
	if code != 200 || strings.Contains(body, `"><b>x`) || strings.Contains(body, "cancel-run") {
		t.Fatalf("run page for a reader: %d\n%s", code, body)
	}
	if code := post("/runs/"+run.ID+"/cancel", reader, ""); code != http.StatusForbidden {
		t.Fatalf("reader cancels: %d", code)
	}
	if code := post("/runs/"+run.ID+"/cancel", writer, "https://evil.example"); code != http.StatusForbidden {
		t.Fatalf("cross-site cancel: %d", code)
	}
	if r, _ := st.GetRun(ctx, run.ID); r.State == "CANCELED" {
		t.Fatal("a refused cancel canceled the run")
	}
	if _, body, _ := get("/runs/"+run.ID, writer); !strings.Contains(body, "cancel-run") {
		t.Fatal("a writer has no cancel button")
	}
	if code := post("/runs/"+run.ID+"/cancel", writer, srv.URL); code != http.StatusSeeOther {
		t.Fatalf("writer cancels: %d", code)
	}
	if r, _ := st.GetRun(ctx, run.ID); r.State != "CANCELED" {
		t.Fatalf("run is %s after cancel", r.State)
	}

	// Login sets an HttpOnly SameSite cookie and returns only to local paths.
	form := url.Values{"token": {reader}}
	req, _ := http.NewRequest("POST", srv.URL+"/login?next=//evil.example/", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(c) != 1 || !c[0].HttpOnly ||
		c[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d %q %+v", resp.StatusCode, resp.Header.Get("Location"), c)
	}
	if code, _, _ := get("/runners", reader); code != http.StatusForbidden {
		t.Fatalf("runners page for a member: %d", code)
	}
	if code, _, _ := get("/static/app.js", ""); code != 200 {
		t.Fatalf("static: %d", code)
	}
}
