// Package api holds ForgeCI's HTTP handlers: plain net/http, so they run
// under httptest, in the local stack and, through package lambdahttp, in
// AWS Lambda behind API Gateway HTTP API.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// writeError writes every error response. Errors that are not *domain.Error
// are internal: the client hears only "internal error" and a request ID, the
// details go to the log under that ID. A value PostgreSQL refused for its
// bytes is the client's error (store.InputError), logged as a warning: a
// value that got that far unchecked is a gap to close.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var de *domain.Error
	if !errors.As(err, &de) {
		if ie := store.InputError(err); ie != nil {
			log.Warn("a value the database refused", "method", r.Method, "path", r.URL.Path, "err", err)
			err = ie
		}
	}
	if !errors.As(err, &de) {
		id := RequestID(r)
		attrs := []any{"request_id", id, "method", r.Method, "path", r.URL.Path, "err", err}
		if c := r.Header.Get("X-Request-Id"); c != "" {
			attrs = append(attrs, "client_request_id", c[:min(len(c), 100)])
		}
		log.Error("internal error", attrs...)
		de = domain.Errorf(domain.EInternal, "internal error (request %s)", id)
	}
	writeJSON(w, protocol.StatusOf(de.Code), protocol.Body(de))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}

type requestIDKey struct{}

// WithRequestID gives r the ID its gateway gave the request (the Lambda
// adapter: API Gateway's), under which an internal error is logged.
func WithRequestID(r *http.Request, id string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
}

// RequestID returns the gateway's request ID, or a new one. Never the
// caller's own X-Request-Id (logged beside it): a client could otherwise
// file its errors under another's ID.
func RequestID(r *http.Request) string {
	if id, ok := r.Context().Value(requestIDKey{}).(string); ok && id != "" {
		return id
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
