package ui_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestSignInOpensASession: the cookie signing in sets holds a session's
// secret, not the API token, and the token in a cookie is no session;
// over HTTPS (API Gateway's X-Forwarded-Proto) the cookie is a Secure
// __Host- one and the answer says Strict-Transport-Security; another
// site cannot sign a user out (nor in, with an origin of the wrong scheme
// or a browser's Sec-Fetch-Site), and signing out ends the session on the
// server, not only in the browser. The raw log may not be framed.
func TestSignInOpensASession(t *testing.T) {
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{})
	srv := httptest.NewServer((&api.Server{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler("ui"))
	defer srv.Close()
	pgtest.Project(t, st, "acme")
	_, token, err := st.CreateUser(ctx, "root", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	run, err := st.CreateRun(ctx, store.NewRun{Project: "acme", Jobs: []store.NewJob{{Name: "build",
		Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, hdr map[string]string, cookie *http.Cookie, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	login := func(hdr map[string]string) (*http.Response, *http.Cookie) {
		t.Helper()
		resp := do("POST", "/login", hdr, nil, "token="+url.QueryEscape(token))
		for _, c := range resp.Cookies() {
			return resp, c
		}
		return resp, nil
	}
	signedIn := func(c *http.Cookie, hdr map[string]string) bool {
		t.Helper()
		resp := do("GET", "/", hdr, c, "")
		return resp.StatusCode == http.StatusOK
	}

	resp, c := login(map[string]string{"Origin": srv.URL})
	if resp.StatusCode != http.StatusSeeOther || c == nil || c.Name != "forgeci_session" || c.Value == token ||
		!c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge != 12*3600 {
		t.Fatalf("sign-in: %d %+v", resp.StatusCode, c)
	}
	if !signedIn(c, nil) {
		t.Fatal("the session's cookie does not sign in")
	}
	// The cookie of dashboards before sessions held the token: it goes.
	old := do("POST", "/login", map[string]string{"Origin": srv.URL}, &http.Cookie{Name: "forgeci_token", Value: token},
		"token="+url.QueryEscape(token))
	if i := slices.IndexFunc(old.Cookies(), func(c *http.Cookie) bool { return c.Name == "forgeci_token" }); i < 0 ||
		old.Cookies()[i].MaxAge >= 0 {
		t.Fatalf("signing in left the old token cookie: %v", old.Cookies())
	}
	if signedIn(&http.Cookie{Name: "forgeci_session", Value: token}, nil) ||
		signedIn(&http.Cookie{Name: "forgeci_token", Value: token}, nil) {
		t.Fatal("an API token in a cookie signs in")
	}
	if r := do("GET", "/runs/"+run.ID+"/jobs/"+run.JobIDs["build"]+"/raw", nil, c, ""); r.StatusCode != http.StatusOK ||
		!strings.Contains(r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("raw log: %d %q", r.StatusCode, r.Header.Get("Content-Security-Policy"))
	}

	// Sign-out from another site, by any means, is refused.
	for _, hdr := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}} {
		if r := do("POST", "/logout", hdr, c, ""); r.StatusCode != http.StatusForbidden || !signedIn(c, nil) {
			t.Fatalf("a cross-site sign-out (%v): %d", hdr, r.StatusCode)
		}
	}
	if r := do("POST", "/logout", map[string]string{"Origin": srv.URL}, c, ""); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", r.StatusCode)
	}
	if signedIn(c, nil) {
		t.Fatal("the cookie of a session signed out still signs in")
	}

	// Behind HTTPS.
	https := map[string]string{"X-Forwarded-Proto": "https", "Origin": "https://" + host}
	resp, c = login(https)
	if resp.StatusCode != http.StatusSeeOther || c == nil || c.Name != "__Host-forgeci_session" || !c.Secure ||
		resp.Header.Get("Strict-Transport-Security") == "" {
		t.Fatalf("sign-in over HTTPS: %d %+v %q", resp.StatusCode, c, resp.Header.Get("Strict-Transport-Security"))
	}
	if !signedIn(c, map[string]string{"X-Forwarded-Proto": "https"}) || signedIn(c, nil) {
		t.Fatal("the secure cookie signs in where it should not, or not where it should")
	}
	for _, hdr := range []map[string]string{
		{"X-Forwarded-Proto": "https", "Origin": "http://" + host}, // the same host, not the same origin
		{"X-Forwarded-Proto": "https", "Sec-Fetch-Site": "same-site"},
	} {
		if r, _ := login(hdr); r.StatusCode != http.StatusForbidden {
			t.Fatalf("sign-in from %v: %d", hdr, r.StatusCode)
		}
	}
}
