package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/forgeci/forgeci/shared/domain"
)

// TestDecodeJSONRefusesNUL: a string that decodes to one holding NUL, a
// value or an object's key at any depth, is refused with 400; a literal
// backslash followed by the text u0000 is no NUL, and invalid UTF-8 is
// taken (the decoder makes it U+FFFD).
func TestDecodeJSONRefusesNUL(t *testing.T) {
	cases := []struct {
		name, body string
		nul        bool
	}{
		{"value", `{"a": "x\u0000y"}`, true},
		{"only NUL", `{"a": "\u0000"}`, true},
		{"key", `{"m": {"k\u0000": "v"}}`, true},
		{"deep in an array", `{"l": [{"m": {"k": ["ok", "\u0000"]}}]}`, true},
		{"after an escaped backslash", `{"a": "\\\u0000"}`, true},
		{"after other escapes", `{"a": "\"\n\u00e9\u0000"}`, true},
		{"escaped backslash then text u0000", `{"a": "\\u0000"}`, false},
		{"two escaped backslashes then text u0000", `{"a": "\\\\u0000"}`, false},
		{"another escape of zeros", `{"a": "\u0030\u00000"}`, true},
		{"a near miss", `{"a": "\u0001\u1000"}`, false},
		{"invalid UTF-8", "{\"a\": \"x\xffy\"}", false},
		{"plain", `{"a": "u0000", "l": [], "m": {}}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v struct {
				A string            `json:"a"`
				M map[string]any    `json:"m"`
				L []json.RawMessage `json:"l"`
			}
			r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
			err := decodeJSON(httptest.NewRecorder(), r, 1<<10, &v)
			if c.nul != (err != nil) {
				t.Fatalf("decodeJSON(%s) = %v, want a refusal: %v", c.body, err, c.nul)
			}
			if err != nil && (domain.ErrorCode(err) != domain.EInvalid || !strings.Contains(err.Error(), "NUL")) {
				t.Fatalf("refusal %v, want invalid naming the NUL", err)
			}
			if !c.nul && strings.IndexByte(v.A, 0) >= 0 {
				t.Fatalf("decoded %q", v.A)
			}
		})
	}
	// The other refusals keep their order and codes.
	for body, code := range map[string]string{`{"a": "\u0000"`: domain.EInvalid, `{"b": "\u0000"}`: domain.EInvalid,
		`{"a": "` + strings.Repeat("x", 2<<10) + `"}`: domain.ETooLarge, ``: domain.EInvalid} {
		var v struct{ A string }
		err := decodeJSON(httptest.NewRecorder(), httptest.NewRequest("POST", "/", strings.NewReader(body)), 1<<10, &v)
		if domain.ErrorCode(err) != code || strings.Contains(err.Error(), "NUL") {
			t.Errorf("%.40s: %v, want %s", body, err, code)
		}
	}
}

// TestWriteErrorInputError: PostgreSQL's refusal of a value's bytes is 400
// invalid, not 500; another of its errors stays internal.
func TestWriteErrorInputError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for code, want := range map[string]int{"22021": 400, "22P05": 400, "22P02": 500, "22007": 500, "40001": 500} {
		w := httptest.NewRecorder()
		err := fmt.Errorf("get run: %w", &pgconn.PgError{Code: code, Message: "refused"})
		writeError(w, httptest.NewRequest("GET", "/v1/runs/x", nil), log, err)
		if w.Code != want {
			t.Errorf("SQLSTATE %s: %d, want %d", code, w.Code, want)
		}
		if want == http.StatusBadRequest && !strings.Contains(w.Body.String(), `"`+domain.EInvalid+`"`) {
			t.Errorf("SQLSTATE %s: %s", code, w.Body.String())
		}
	}
}

// TestRequestIDIsTheGateways: an internal error names the gateway's
// request ID, or a new one, never the caller's X-Request-Id, which is
// logged beside it.
func TestRequestIDIsTheGateways(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	r := httptest.NewRequest("GET", "/v1/runs/x", nil)
	r.Header.Set("X-Request-Id", "someone-elses")
	for _, c := range []struct {
		r    *http.Request
		want string
	}{{r, ""}, {WithRequestID(r, "gw-7"), "gw-7"}} {
		w := httptest.NewRecorder()
		writeError(w, c.r, log, fmt.Errorf("boom"))
		if strings.Contains(w.Body.String(), "someone-elses") || !strings.Contains(w.Body.String(), "internal error (request "+c.want) {
			t.Errorf("answered %s, want the request %q", w.Body.String(), c.want)
		}
	}
	if strings.Count(logged.String(), "client_request_id=someone-elses") != 2 {
		t.Errorf("the caller's ID is not logged beside the gateway's: %s", logged.String())
	}
}
