package protocol

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
)

// statusOf is the one table from error codes to HTTP statuses, for the
// runner protocol, the user API and the dashboard alike.
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

// ErrorBody is every error answer: {"error": {"code", "message",
// "details"?}, "next_offset"?}.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		// Details locate each problem of an invalid pipeline file.
		Details []domain.Detail `json:"details,omitempty"`
	} `json:"error"`
	// NextOffset comes with offset_mismatch: the log's current end.
	NextOffset *int64 `json:"next_offset,omitempty"`
}

// Body returns the error body of e.
func Body(e *domain.Error) ErrorBody {
	var b ErrorBody
	b.Error.Code, b.Error.Message, b.Error.Details = e.Code, e.Message, e.Details
	b.NextOffset = e.NextOffset
	return b
}

// codeOf is a code for an answer whose body is not ours (a proxy's 502,
// API Gateway's 429): the code whose status it is, or by its class.
func codeOf(status int) string {
	switch {
	case status == http.StatusConflict:
		return domain.EConflict
	case status >= 500 || status == http.StatusTooManyRequests:
		return domain.EUnavailable
	}
	for code, s := range statusOf {
		if s == status && code != domain.EConflict {
			return code
		}
	}
	return domain.EInvalid
}

// DecodeError turns an error answer back into the domain error the server
// wrote, with the status it came with. An answer that is not an ErrorBody
// keeps its status and gets the code of that status.
func DecodeError(status int, raw []byte) *domain.Error {
	var b ErrorBody
	if json.Unmarshal(raw, &b) != nil || b.Error.Code == "" {
		msg := strings.TrimSpace(string(raw))
		if len(msg) > 500 {
			msg = msg[:500]
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		return &domain.Error{Code: codeOf(status), Message: msg, Status: status}
	}
	return &domain.Error{Code: b.Error.Code, Message: b.Error.Message, Details: b.Error.Details,
		NextOffset: b.NextOffset, Status: status}
}
