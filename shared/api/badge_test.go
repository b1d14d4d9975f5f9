package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestBadge: a project's badge shows its branch's newest ended run; it is
// served without login only once the project's admin makes badges public
// (cacheable, with an ETag a client revalidates), never otherwise.
func TestBadge(t *testing.T) {
	f := newTenancy(t)
	ctx := context.Background()
	path := "/v1/projects/" + f.project.ID + "/badge.svg?branch=main"
	get := func(token string, header map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp, b.String()
	}
	admin, err := f.store.AuthenticateUser(ctx, f.adminA)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := get("", nil); resp.StatusCode != 404 {
		t.Fatalf("a private project's badge without login: %d", resp.StatusCode)
	}
	// A passed run of main, then the badges made public by the admin.
	run, err := f.store.CreateRun(ctx, store.NewRun{Project: "acme/app", GitRef: "refs/heads/main", Actor: "github:1", Jobs: []store.NewJob{{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	f.exec(`UPDATE runs SET state = 'PASSED', finished_at = now() WHERE id = $1`, run.ID)
	on := true
	if err := f.store.SetSettings(ctx, admin, f.project.ID, store.Settings{BadgesPublic: &on}); err != nil {
		t.Fatal(err)
	}
	resp, svg := get("", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/svg+xml" || resp.Header.Get("Cache-Control") != "public, max-age=60" ||
		!strings.Contains(svg, ">passing<") || !strings.Contains(svg, ">build<") {
		t.Fatalf("public badge: %d %v\n%s", resp.StatusCode, resp.Header, svg)
	}
	if again, _ := get("", map[string]string{"If-None-Match": resp.Header.Get("ETag")}); again.StatusCode != 304 {
		t.Fatalf("revalidation: %d", again.StatusCode)
	}
	f.exec(`UPDATE runs SET state = 'FAILED' WHERE id = $1`, run.ID)
	if r2, svg := get("", map[string]string{"If-None-Match": resp.Header.Get("ETag")}); r2.StatusCode != 200 || !strings.Contains(svg, ">failing<") {
		t.Fatalf("after the run failed: %d %s", r2.StatusCode, svg)
	}
	if r3, _ := get(f.runner.Token, nil); r3.StatusCode != 401 {
		t.Fatalf("a runner's token: %d", r3.StatusCode)
	}
	// A reader's view is private to them.
	if r4, _ := get(f.readerA, nil); r4.StatusCode != 200 || r4.Header.Get("Cache-Control") != "private, no-store" {
		t.Fatalf("a reader: %d %s", r4.StatusCode, r4.Header.Get("Cache-Control"))
	}
	off := false
	if err := f.store.SetSettings(ctx, admin, f.project.ID, store.Settings{BadgesPublic: &off}); err != nil {
		t.Fatal(err)
	}
	if r5, _ := get("", nil); r5.StatusCode != 404 {
		t.Fatalf("badges private again: %d", r5.StatusCode)
	}
	if _, err := f.store.Badge(ctx, nil, f.project.ID, "x..y"); domain.ErrorCode(err) != domain.EInvalid {
		t.Fatalf("a bad branch: %v", err)
	}
}
