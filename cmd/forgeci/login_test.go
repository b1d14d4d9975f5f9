package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoginTakesTheTokenOnStdin: with no --token and no FORGECI_TOKEN,
// login reads the token from stdin (a token in a command line is in the
// process list), checks it with the server and saves it; with none there
// either, it says where a token may come from.
func TestLoginTakesTheTokenOnStdin(t *testing.T) {
	const token = "fru_from-stdin"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/me" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":{"code":"unauthenticated","message":"no"}}`, http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "u", "name": "ann", "role": "user"})
	}))
	defer srv.Close()
	t.Setenv("FORGECI_TOKEN", "")
	t.Setenv("FORGECI_URL", "")
	loginWith := func(cfg, stdin string) error {
		return withStdin(t, stdin, func() error {
			root := newRoot()
			root.SetArgs([]string{"--config", cfg, "login", "--url", srv.URL})
			return root.ExecuteContext(context.Background())
		})
	}
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := loginWith(cfg, ""); err == nil || !strings.Contains(err.Error(), "FORGECI_TOKEN or write it on stdin") {
		t.Fatalf("no token anywhere: %v", err)
	}
	if err := loginWith(cfg, token+"\n"); err != nil {
		t.Fatalf("login with the token on stdin: %v", err)
	}
	var saved config
	b, err := os.ReadFile(cfg)
	if err != nil || json.Unmarshal(b, &saved) != nil || saved.Token != token || saved.URL != srv.URL {
		t.Fatalf("saved %s (%v)", b, err)
	}
}
