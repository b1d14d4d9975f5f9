// Package api holds ForgeCI's HTTP handlers: plain net/http, so they run
// under httptest, in the local stack and, through package lambdahttp, in
// AWS Lambda behind API Gateway HTTP API.
package api

import (
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
		id := requestID(r)
		log.Error("internal error", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
		de = domain.Errorf(domain.EInternal, "internal error (request %s)", id)
	}
	writeJSON(w, protocol.StatusOf(de.Code), protocol.Body(de))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}

// requestID returns the caller's or API Gateway's request ID, or a new one.
func requestID(r *http.Request) string {
	for _, h := range []string{"X-Request-Id", "Apigw-Requestid"} {
		if v := r.Header.Get(h); v != "" && len(v) <= 100 {
			return v
		}
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
