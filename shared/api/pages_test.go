package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// TestListsArePaged: every list route serves at most ?limit= items a page
// and a cursor to the next; walking the cursors visits every item exactly
// once, in order; a limit over the maximum or a cursor the server did not
// give out is 400.
func TestListsArePaged(t *testing.T) {
	f := newTenancy(t)
	ctx := context.Background()
	global, _ := f.store.AuthenticateUser(ctx, f.global)
	for i := range 7 {
		p, err := f.store.CreateProject(ctx, fmt.Sprintf("many/p%d", i), "main")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.SetMember(ctx, global, p.ID, "rita", store.RoleRead, false); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.SetMember(ctx, global, f.project.ID, fmt.Sprintf("u%d", i), store.RoleRead, false); err == nil {
			t.Fatal("a member who is not a user")
		}
		if _, _, err := f.store.CreateUser(ctx, fmt.Sprintf("u%d", i), store.RoleUser); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.SetMember(ctx, global, f.project.ID, fmt.Sprintf("u%d", i), store.RoleRead, false); err != nil {
			t.Fatal(err)
		}
		if err := f.store.SetSecret(ctx, global, f.project.ID, fmt.Sprintf("S_%d", i), "a value"); err != nil {
			t.Fatal(err)
		}
		f.createRun("j")
		f.registerRunner(fmt.Sprintf("r%d", i))
		f.exec(`INSERT INTO scm_deliveries (guid, event, repository_id, payload, received_at) VALUES ($1, 'push', 5, '{}', $2)`,
			fmt.Sprintf("d%d", i), time.Now().Add(-time.Duration(i)*time.Minute))
	}
	for _, tc := range []struct{ path, field, key, token string }{
		{"/v1/runs", "runs", "id", f.global},
		{"/v1/projects", "projects", "name", f.readerA},
		{"/v1/projects/" + f.project.ID + "/members", "members", "user", f.global},
		{"/v1/projects/" + f.project.ID + "/secrets", "secrets", "name", f.global},
		{"/v1/users", "users", "name", f.global},
		{"/v1/runners", "runners", "id", f.global},
		{"/v1/deliveries", "deliveries", "guid", f.global},
	} {
		all := f.walk(tc.path, tc.field, tc.key, tc.token, 0)
		paged := f.walk(tc.path, tc.field, tc.key, tc.token, 3)
		if len(all) < 7 || strings.Join(all, ",") != strings.Join(paged, ",") {
			t.Errorf("%s: one page %v, pages of 3 %v", tc.path, all, paged)
		}
		for _, bad := range []string{"?limit=201", "?limit=0", "?cursor=not-a-cursor"} {
			if s, out := f.call("GET", tc.path+bad, tc.token, nil, false); s != 400 && !(tc.field == "runs" && bad == "?cursor=not-a-cursor") {
				t.Errorf("%s%s: %d %s", tc.path, bad, s, out)
			}
		}
	}
}

// walk follows a list's cursors (limit 0: one default page, which must hold
// everything here) and returns each item's key, in the order served.
func (f *tenancy) walk(path, field, key, token string, limit int) []string {
	f.t.Helper()
	var keys []string
	cursor := ""
	for pages := 0; ; pages++ {
		q := url.Values{}
		if limit > 0 {
			q.Set("limit", fmt.Sprint(limit))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		s, out := f.call("GET", path+"?"+q.Encode(), token, nil, false)
		var page struct {
			Next  string `json:"next_cursor"`
			Items []map[string]any
		}
		var raw map[string]json.RawMessage
		if s != 200 || json.Unmarshal([]byte(out), &raw) != nil {
			f.t.Fatalf("%s: %d %s", path, s, out)
		}
		_ = json.Unmarshal(raw[field], &page.Items)
		_ = json.Unmarshal(raw["next_cursor"], &page.Next)
		if limit > 0 && len(page.Items) > limit {
			f.t.Fatalf("%s: %d items on a page of %d", path, len(page.Items), limit)
		}
		for _, it := range page.Items {
			keys = append(keys, fmt.Sprint(it[key]))
		}
		if page.Next == "" || pages > 50 {
			return keys
		}
		cursor = page.Next
	}
}
