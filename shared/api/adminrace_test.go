package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestAdminChangesCheckedWhenMade: a global admin's change is checked in
// the transaction that makes it, not only when the request arrived. Each
// request here is authenticated, then its admin is disabled while its
// body is still on the way (the server waits in its first body read), and
// then the body is sent: the answer is 401 and nothing is made.
func TestAdminChangesCheckedWhenMade(t *testing.T) {
	e := setup(t)
	// The same server, telling the test when a handler first reads its
	// body: by then the request was authenticated.
	reading := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &firstRead{ReadCloser: r.Body, reading: reading}
		e.server.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	other, _, err := e.store.CreateUser(context.Background(), "other", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/users", `{"name": "backdoor", "role": "admin"}`},
		{"/v1/users/" + other.ID + "/tokens", `{"description": "for me"}`},
		{"/v1/registration-tokens", `{"description": "a runner of mine"}`},
	} {
		mallory := e.user("mallory-"+strings.ReplaceAll(tc.path, "/", "-"), store.RoleAdmin)
		before := e.snapshotOf("users", "user_tokens", "registration_tokens")
		body, send := io.Pipe()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+tc.path, body)
		req.Header.Set("Authorization", "Bearer "+mallory)
		answered := make(chan *http.Response, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
			}
			answered <- resp
		}()
		select {
		case <-reading:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the handler never read its body", tc.path)
		}
		u, err := e.store.AuthenticateUser(context.Background(), mallory)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.DisableUser(context.Background(), u.ID); err != nil {
			t.Fatal(err)
		}
		_, _ = send.Write([]byte(tc.body))
		send.Close()
		resp := <-answered
		if resp == nil {
			continue
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s by an admin disabled meanwhile: %d %s", tc.path, resp.StatusCode, got)
		}
		// Only the disabling itself changed anything.
		e.exec(`UPDATE users SET disabled_at = NULL WHERE id = $1`, u.ID)
		e.exec(`UPDATE user_tokens SET revoked_at = NULL WHERE user_id = $1`, u.ID)
		if after := e.snapshotOf("users", "user_tokens", "registration_tokens"); after != before {
			t.Errorf("%s by an admin disabled meanwhile changed the database:\n%s\nwas\n%s", tc.path, after, before)
		}
	}
}

// TestAdminChangesStaleAdmin: every global admin's change refuses an admin
// disabled (401) or demoted (403) since authenticating, and makes nothing.
func TestAdminChangesStaleAdmin(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	target, _, err := e.store.CreateUser(ctx, "target", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	runner := e.registerRunner("box")
	changes := map[string]func(by store.User) error{
		"create user": func(by store.User) error {
			_, _, err := e.store.CreateUserAs(ctx, by, "backdoor", store.RoleAdmin)
			return err
		},
		"token for another": func(by store.User) error {
			_, err := e.store.CreateUserTokenAs(ctx, by, target.ID, store.NewToken{})
			return err
		},
		"disable user": func(by store.User) error { _, err := e.store.DisableUserAs(ctx, by, target.ID); return err },
		"registration token": func(by store.User) error {
			_, _, err := e.store.CreateRegistrationTokenAs(ctx, by, time.Hour, "", store.Scope{})
			return err
		},
		"revoke runner": func(by store.User) error { return e.store.RevokeRunnerAs(ctx, by, runner.ID) },
	}
	for name, change := range changes {
		for _, stale := range []struct {
			how, sql, code string
		}{
			{"disabled", `UPDATE users SET disabled_at = now() WHERE id = $1`, domain.EUnauthorized},
			{"demoted", `UPDATE users SET role = 'user' WHERE id = $1`, domain.EForbidden},
		} {
			token := e.user("admin-"+strings.ReplaceAll(name, " ", "-")+"-"+stale.how, store.RoleAdmin)
			by, err := e.store.AuthenticateUser(ctx, token)
			if err != nil {
				t.Fatal(err)
			}
			e.exec(stale.sql, by.ID)
			before := e.snapshotOf("users", "user_tokens", "registration_tokens", "runners")
			if err := change(by); !domain.Is(err, stale.code) {
				t.Errorf("%s by an admin %s since: %v, want %s", name, stale.how, err, stale.code)
			}
			if after := e.snapshotOf("users", "user_tokens", "registration_tokens", "runners"); after != before {
				t.Errorf("%s by an admin %s since changed the database", name, stale.how)
			}
		}
		// A current admin may.
		by, err := e.store.AuthenticateUser(ctx, e.user("admin-"+strings.ReplaceAll(name, " ", "-"), store.RoleAdmin))
		if err != nil {
			t.Fatal(err)
		}
		if err := change(by); err != nil {
			t.Errorf("%s by a current admin: %v", name, err)
		}
		e.exec(`UPDATE users SET disabled_at = NULL WHERE id = $1`, target.ID)
	}
}

// TestAdminsDisableEachOther: two admins disabling each other at once do
// not deadlock: one wins, and the other finds itself disabled.
func TestAdminsDisableEachOther(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for i := range 10 {
		a, _ := e.store.AuthenticateUser(ctx, e.user("a"+string(rune('0'+i)), store.RoleAdmin))
		b, _ := e.store.AuthenticateUser(ctx, e.user("b"+string(rune('0'+i)), store.RoleAdmin))
		errs := make(chan error, 2)
		go func() { _, err := e.store.DisableUserAs(ctx, a, b.ID); errs <- err }()
		go func() { _, err := e.store.DisableUserAs(ctx, b, a.ID); errs <- err }()
		var ok, refused int
		for range 2 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case domain.Is(err, domain.EUnauthorized):
				refused++
			default:
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if ok != 1 || refused != 1 {
			t.Fatalf("round %d: %d disabled, %d refused; want one each", i, ok, refused)
		}
	}
}

// firstRead signals once, at the body's first read.
type firstRead struct {
	io.ReadCloser
	reading chan<- struct{}
	done    bool
}

func (f *firstRead) Read(p []byte) (int, error) {
	if !f.done {
		f.done = true
		f.reading <- struct{}{}
	}
	return f.ReadCloser.Read(p)
}
