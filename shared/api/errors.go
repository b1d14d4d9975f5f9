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
)

// statusOf is the one table from error codes to HTTP statuses.
var statusOf = map[string]int{
	domain.EInvalid:        http.StatusBadRequest,
	domain.EUnauthorized:   http.StatusUnauthorized,
	domain.EForbidden:      http.StatusForbidden,
	domain.ENotFound:       http.StatusNotFound,
	domain.ELeaseMismatch:  http.StatusConflict,
	domain.ELeaseExpired:   http.StatusConflict,
	domain.EJobFinished:    http.StatusConflict,
	domain.EConflict:       http.StatusConflict,
	domain.ETooLarge:       http.StatusRequestEntityTooLarge,
	domain.EOffsetMismatch: http.StatusRequestedRangeNotSatisfiable,
	domain.ENotImplemented: http.StatusNotImplemented,
	domain.EUnavailable:    http.StatusServiceUnavailable,
	domain.EInternal:       http.StatusInternalServerError,
}

// StatusOf returns the HTTP status for an error code.
func StatusOf(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	NextOffset *int64 `json:"next_offset,omitempty"`
}

// writeError writes every error response. Errors that are not *domain.Error
// are internal: the client hears only "internal error" and a request ID, the
// details go to the log under that ID.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var body errorBody
	var de *domain.Error
	if errors.As(err, &de) {
		body.Error.Code, body.Error.Message, body.NextOffset = de.Code, de.Message, de.NextOffset
	} else {
		id := requestID(r)
		log.Error("internal error", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
		body.Error.Code, body.Error.Message = domain.EInternal, "internal error (request "+id+")"
	}
	writeJSON(w, StatusOf(body.Error.Code), body)
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
