package ui

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/forgeci/forgeci/shared/store"
)

// TestFailInputError: a value PostgreSQL refused for its bytes is shown as
// the user's error (400), not as something that went wrong; its other
// errors stay internal (500), their text in the log only.
func TestFailInputError(t *testing.T) {
	u := &UI{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for code, want := range map[string]int{"22021": 400, "22P05": 400, "22P02": 500, "23505": 500} {
		w := httptest.NewRecorder()
		u.fail(w, store.User{}, fmt.Errorf("list runs: %w", &pgconn.PgError{Code: code, Message: "the database's words"}))
		body := w.Body.String()
		if w.Code != want || strings.Contains(body, "the database&#39;s words") || strings.Contains(body, "the database's words") {
			t.Errorf("SQLSTATE %s: %d, want %d\n%.300s", code, w.Code, want, body)
		}
	}
}
