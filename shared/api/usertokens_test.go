package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

type tokenList struct {
	Tokens []store.TokenInfo `json:"tokens"`
	Next   string            `json:"next_cursor"`
}

func (e *env) tokens(path, token string) tokenList {
	e.t.Helper()
	st, b := e.get(path, token)
	var out tokenList
	if err := json.Unmarshal(b, &out); st != 200 || err != nil {
		e.t.Fatalf("GET %s: %d %s", path, st, b)
	}
	if strings.Contains(string(b), "fru_") || strings.Contains(string(b), "hash") {
		e.t.Fatalf("GET %s shows a secret: %s", path, b)
	}
	return out
}

// TestUserTokens: people list and revoke their own API tokens, global
// admins anyone's. A revoked token stops working at once, with the
// dashboard sessions opened with it; a token of another user is not
// found through one's own path, and another user's path is refused.
func TestUserTokens(t *testing.T) {
	e := setup(t)
	admin := e.user("root", store.RoleAdmin)
	first, reader := e.user("walter", store.RoleWrite), e.user("rita", store.RoleRead)
	session := pgtest.SessionCookie(t, e.store, first)

	mine := e.tokens("/v1/users/me/tokens", first)
	if len(mine.Tokens) != 1 || mine.Tokens[0].Description != "first token" || mine.Tokens[0].RevokedAt != nil {
		t.Fatalf("own tokens: %+v", mine)
	}
	firstID := mine.Tokens[0].ID
	var walter store.User
	_, b := e.get("/v1/me", first)
	_ = json.Unmarshal(b, &walter)
	// The admin makes walter's second token: it is not made with his first.
	st, b := e.post("/v1/users/"+walter.ID+"/tokens", admin, map[string]any{"description": "laptop"})
	if st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	second, secondID := str(b, "token"), str(b, "id")
	page := e.tokens("/v1/users/me/tokens?limit=1", first)
	if len(page.Tokens) != 1 || page.Tokens[0].ID != secondID || page.Next == "" {
		t.Fatalf("first page, newest first: %+v", page)
	}
	if rest := e.tokens("/v1/users/me/tokens?limit=1&cursor="+page.Next, first); len(rest.Tokens) != 1 || rest.Tokens[0].ID != firstID || rest.Next != "" {
		t.Fatalf("second page: %+v", rest)
	}

	// Another user's tokens: refused by user, not found by token.
	readerID := e.tokens("/v1/users/me/tokens", reader).Tokens[0].ID
	var me store.User
	_, b = e.get("/v1/me", reader)
	_ = json.Unmarshal(b, &me)
	if st, b := e.get("/v1/users/"+me.ID+"/tokens", first); st != 403 {
		t.Errorf("listing another's tokens: %d %s", st, b)
	}
	if st, b := e.post("/v1/users/"+me.ID+"/tokens/"+readerID+"/revoke", first, map[string]any{}); st != 403 {
		t.Errorf("revoking another's token by their path: %d %s", st, b)
	}
	if st, b := e.post("/v1/users/me/tokens/"+readerID+"/revoke", first, map[string]any{}); st != 404 {
		t.Errorf("revoking another's token by one's own path: %d %s", st, b)
	}
	if st, _ := e.get("/v1/me", reader); st != 200 {
		t.Fatalf("the reader's token stopped working: %d", st)
	}

	// Revoking one's own: that token and its session end, the other works.
	if !e.pageServed(session) {
		t.Fatal("the session does not serve the dashboard")
	}
	st, b = e.post("/v1/users/me/tokens/"+firstID+"/revoke", first, map[string]any{})
	var revoked store.TokenInfo
	if err := json.Unmarshal(b, &revoked); st != 200 || err != nil || revoked.ID != firstID || revoked.RevokedAt == nil {
		t.Fatalf("revoke: %d %s", st, b)
	}
	if st, _ := e.get("/v1/me", first); st != 401 {
		t.Errorf("a revoked token: %d, want 401", st)
	}
	if e.pageServed(session) {
		t.Error("a session of a revoked token still serves the dashboard")
	}
	if st, _ := e.get("/v1/me", second); st != 200 {
		t.Errorf("the other token: %d", st)
	}
	st, b = e.post("/v1/users/me/tokens/"+firstID+"/revoke", second, map[string]any{})
	var again store.TokenInfo
	if err := json.Unmarshal(b, &again); st != 200 || err != nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Errorf("revoking again: %d %s (first revoked at %v)", st, b, revoked.RevokedAt)
	}

	// A token made with a token goes with it, however deep: whoever held
	// a leaked token keeps no copy it minted.
	st, b = e.post("/v1/users/me/tokens", second, map[string]any{"description": "minted"})
	third, thirdID := str(b, "token"), str(b, "id")
	st2, b2 := e.post("/v1/users/me/tokens", third, map[string]any{"description": "minted again"})
	fourth, fourthID := str(b2, "token"), str(b2, "id")
	if st != 201 || st2 != 201 {
		t.Fatalf("tokens made with tokens: %d %s, %d %s", st, b, st2, b2)
	}
	for _, tok := range e.tokens("/v1/users/me/tokens", second).Tokens {
		if want := map[string]string{thirdID: secondID, fourthID: thirdID}[tok.ID]; want != "" && tok.CreatedBy != want {
			t.Errorf("token %s made with %q, want %s", tok.ID, tok.CreatedBy, want)
		}
	}
	st, b = e.post("/v1/users/me/tokens/"+secondID+"/revoke", admin, map[string]any{})
	var chain store.TokenInfo
	_ = json.Unmarshal(b, &chain)
	if st != 404 {
		t.Errorf("an admin revoking by their own path a token of walter's: %d %s, want 404", st, b)
	}
	st, b = e.post("/v1/users/"+walter.ID+"/tokens/"+secondID+"/revoke", admin, map[string]any{})
	_ = json.Unmarshal(b, &chain)
	slices.Sort(chain.AlsoRevoked)
	want := []string{thirdID, fourthID}
	slices.Sort(want)
	if st != 200 || chain.ID != secondID || !slices.Equal(chain.AlsoRevoked, want) {
		t.Errorf("revoking the token others were made with: %d %s, want also %v", st, b, want)
	}
	for _, tok := range []string{second, third, fourth} {
		if st, _ := e.get("/v1/me", tok); st != 401 {
			t.Errorf("a token of the revoked chain: %d, want 401", st)
		}
	}

	// A global admin: anyone's, and a clear 404 for what does not exist.
	if got := e.tokens("/v1/users/"+me.ID+"/tokens", admin); len(got.Tokens) != 1 || got.Tokens[0].ID != readerID {
		t.Fatalf("an admin lists the reader's tokens: %+v", got)
	}
	if st, b := e.post("/v1/users/"+me.ID+"/tokens/"+readerID+"/revoke", admin, map[string]any{}); st != 200 {
		t.Fatalf("an admin revokes the reader's token: %d %s", st, b)
	}
	if st, _ := e.get("/v1/me", reader); st != 401 {
		t.Errorf("the reader's revoked token: %d, want 401", st)
	}
	for _, path := range []string{"/v1/users/nobody/tokens", "/v1/users/" + me.ID + "/tokens/nothing/revoke"} {
		var st int
		var b []byte
		if strings.HasSuffix(path, "/revoke") {
			st, b = e.post(path, admin, map[string]any{})
		} else {
			st, b = e.get(path, admin)
		}
		if st != 404 || errCode(b) != "not_found" {
			t.Errorf("%s: %d %s, want 404", path, st, b)
		}
	}
}

// pageServed reports whether the dashboard serves its front page to a
// session (or sends it to the login page).
func (e *env) pageServed(c *http.Cookie) bool {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
	req.AddCookie(c)
	resp, err := noRedirect.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
