package ui_test

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestBadInputPages: what a page or form cannot use is the user's error,
// shown on the error page with its 4xx status, and changes nothing: bad
// bytes in the path or the query, a cursor this server never gave out, a
// form that does not parse or is over its limit, a form field with NUL.
func TestBadInputPages(t *testing.T) {
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{})
	srv := httptest.NewServer((&api.Server{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler("ui"))
	defer srv.Close()
	project := pgtest.Project(t, st, "acme/app")
	root, admin, err := st.CreateUser(ctx, "root", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	public := true
	if err := st.SetSettings(ctx, root, project.ID, store.Settings{BadgesPublic: &public}); err != nil {
		t.Fatal(err)
	}
	session := pgtest.SessionCookie(t, st, admin)
	call := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	foreign := base64.RawURLEncoding.EncodeToString([]byte(`["nope","x"]`))
	big := "ref=main&pad=" + strings.Repeat("x", 64<<10)
	cases := []struct {
		name, method, path, body string
		status                   int
		says                     string
	}{
		{"NUL in a path value", "GET", "/runs/%00", "", 400, "NUL"},
		{"invalid UTF-8 in a path value", "GET", "/projects/%FF", "", 400, "UTF-8"},
		{"NUL in a filter", "GET", "/?branch=%00", "", 400, "NUL"},
		{"invalid UTF-8 in a filter", "GET", "/?project=%FF", "", 400, "UTF-8"},
		{"NUL on a public page", "GET", "/login?next=%00", "", 400, "NUL"},
		{"a foreign runners cursor", "GET", "/runners?cursor=" + foreign, "", 400, "cursor"},
		{"an unparsable run form", "POST", "/projects/acme%2Fapp/run", "ref=main&a=%zz", 400, "form"},
		{"a run form over its limit", "POST", "/projects/acme%2Fapp/run", big, 413, "limit"},
		{"NUL in a run form", "POST", "/projects/acme%2Fapp/run", "ref=main%00", 400, "NUL"},
		{"a badges form over its limit", "POST", "/projects/acme%2Fapp/badges", "pad=" + strings.Repeat("x", 9<<10), 413, "limit"},
		{"an unparsable badges form", "POST", "/projects/acme%2Fapp/badges", "public=%zz", 400, "form"},
		{"NUL in a member form", "POST", "/projects/acme%2Fapp/members", "user=nina%00&role=read", 400, "NUL"},
		{"NUL in a project form", "POST", "/projects", "name=new%00", 400, "NUL"},
		{"a login form over its limit", "POST", "/login", "token=" + strings.Repeat("x", 5<<10), 413, "limit"},
	}
	for _, c := range cases {
		status, body := call(c.method, c.path, c.body)
		if status != c.status || !strings.HasPrefix(body, "<!doctype html>") || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d, want %d and a page saying %q\n%.400s", c.name, status, c.status, c.says, body)
		}
	}
	if got, err := st.ProjectStorage(ctx, root, project.ID); err != nil || !got.BadgesPublic {
		t.Fatalf("a refused badges form changed them: %+v %v", got, err)
	}
	if ps, _, err := st.ListProjects(ctx, root, store.Page{}); err != nil || len(ps) != 1 {
		t.Fatalf("projects after refused forms: %v %v", ps, err)
	}
}
