package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// walkRoute is one registered route as a caller who may use it calls it:
// a valid path, token and body, so that only the bad bytes put in are
// wrong.
type walkRoute struct {
	method, pattern, path string
	token                 string
	page                  bool // a dashboard page: a cookie, and HTML answers
	body                  any  // a JSON object (map), a form (string) or nil
}

// badQueryNames are the query parameters routes read; a bad byte in any
// parameter is refused, these are the ones that once reached the database.
var badQueryNames = []string{"cursor", "before", "project", "branch", "state", "trigger", "ref", "environment",
	"members", "secrets"}

// TestBadBytesAreRefused: every route of every function (the API, the
// runner's, the dashboard's pages), called by a caller it serves, with a
// NUL byte or invalid UTF-8 in each path value, in a query parameter, and
// a NUL in each string of its JSON or form body, answers 400 in its own
// style (the JSON envelope, or a dashboard page) and changes nothing.
// PostgreSQL refuses such text, and it used to come back as 500.
func TestBadBytesAreRefused(t *testing.T) {
	f := newTenancy(t)
	routes := f.walkRoutes()
	before := f.state()
	for _, wr := range routes {
		t.Run(wr.method+" "+wr.pattern, func(t *testing.T) {
			f.t = t
			for _, bad := range []string{"%00", "%FF", "a%00b"} {
				for _, path := range badPaths(wr.pattern, wr.path, bad) {
					f.expectRefused(wr, path, wr.body)
				}
				for _, name := range badQueryNames {
					f.expectRefused(wr, wr.path+"?"+name+"="+bad, wr.body)
				}
			}
			for _, body := range badBodies(wr.body) {
				f.expectRefused(wr, wr.path, body)
			}
		})
	}
	f.t = t
	if after := f.state(); after != before {
		t.Errorf("refused calls changed something:\n%s", diff(before, after))
	}
}

// expectRefused calls wr at path with body and wants 400 invalid, in the
// route's style.
func (f *tenancy) expectRefused(wr walkRoute, path string, body any) {
	f.t.Helper()
	status, out := f.call(wr.method, path, wr.token, body, wr.page)
	style := errCode([]byte(out)) == domain.EInvalid
	if wr.page {
		style = strings.HasPrefix(out, "<!doctype html>")
	}
	if status != 400 || !style {
		f.t.Errorf("%s %s %q: %d, want 400 (a page: %v)\n%.300s", wr.method, path, body, status, wr.page, out)
	}
}

// walkRoutes is every registered route with a valid call: the tenancy
// matrix's for the user API and the pages, the fencing matrix's for the
// runner's job routes (under a live lease), and the rest here.
func (f *tenancy) walkRoutes() []walkRoute {
	ctx := context.Background()
	c := f.claim(f.runner)
	if c.Lease.JobID == "" {
		f.t.Fatal("no job to hold a lease on")
	}
	reg, _, err := f.store.CreateRegistrationToken(ctx, time.Minute, "test", store.Scope{Untrusted: true})
	if err != nil {
		f.t.Fatal(err)
	}
	cases := map[string]tenancyCase{}
	for _, tc := range tenancyCases() {
		cases[tc.route] = tc
	}
	jobBodies := map[string]any{}
	for _, rc := range jobRoutes(f.env) {
		jobBodies[protocol.JobPattern(rc.path)] = leaseBody(c.Lease, rc.extra)
	}
	others := map[string]walkRoute{
		"POST " + protocol.PathRegister: {body: map[string]any{"registration_token": reg, "name": "new-box", "labels": []string{"linux"}}},
		"POST " + protocol.PathClaim: {token: f.runner.Token,
			body: map[string]any{"wait_seconds": 0, "features": []string{domain.FeatureIDToken}}},
		"POST " + protocol.PathIntrospect: {body: map[string]any{"token": "not-a-token"}},
		"GET /static/{name}":              {path: "/static/app.js", page: true},
		"POST /login":                     {path: "/login", page: true, body: "token=" + url.QueryEscape(f.readerA)},
		"GET /login":                      {path: "/login", page: true},
		"POST /logout":                    {path: "/logout", page: true},
	}
	var out []walkRoute
	for _, fn := range api.Functions() {
		for _, r := range api.Routes(fn) {
			key := r.Method + " " + r.Path
			wr, ok := others[key]
			switch tc, isCase := cases[key]; {
			case isCase:
				path, _, _ := strings.Cut(f.expand(tc.path), "?")
				wr = walkRoute{path: path, token: f.needed(tc), page: tc.page(), body: tc.body(f)}
			case jobBodies[r.Path] != nil:
				wr = walkRoute{token: f.runner.Token, body: jobBodies[r.Path]}
			case !ok:
				wr.page = fn == "ui"
			}
			wr.method, wr.pattern = r.Method, r.Path
			if wr.path == "" {
				wr.path = strings.ReplaceAll(r.Path, "{job_id}", c.Lease.JobID)
			}
			if strings.Contains(wr.path, "{") {
				f.t.Fatalf("%s: no value for %s", key, wr.path)
			}
			out = append(out, wr)
		}
	}
	return out
}

// badPaths is path with each of pattern's {values} in turn replaced by
// bad (path and pattern have the same segments).
func badPaths(pattern, path, bad string) []string {
	want, have := strings.Split(pattern, "/"), strings.Split(path, "/")
	var out []string
	for i, seg := range want {
		if strings.HasPrefix(seg, "{") && i < len(have) {
			p := slices.Clone(have)
			p[i] = bad
			out = append(out, strings.Join(p, "/"))
		}
	}
	return out
}

// badBodies are copies of a valid body, each with a NUL added to one of
// its strings (a JSON object's values at any depth, or a form's values).
func badBodies(body any) []any {
	switch b := body.(type) {
	case string:
		form, _ := url.ParseQuery(b)
		var out []any
		for k := range form {
			bad := maps.Clone(form)
			bad[k] = []string{form.Get(k) + "\x00"}
			out = append(out, bad.Encode())
		}
		return out
	case nil:
		return nil
	}
	raw, _ := json.Marshal(body)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	_ = dec.Decode(&v)
	return withNUL(v)
}

// withNUL returns copies of v, each with a NUL added to one of its strings.
func withNUL(v any) []any {
	var out []any
	switch x := v.(type) {
	case string:
		out = append(out, x+"\x00")
	case map[string]any:
		for k, e := range x {
			for _, bad := range withNUL(e) {
				m := maps.Clone(x)
				m[k] = bad
				out = append(out, m)
			}
		}
	case []any:
		for i, e := range x {
			for _, bad := range withNUL(e) {
				s := slices.Clone(x)
				s[i] = bad
				out = append(out, s)
			}
		}
	}
	return out
}
