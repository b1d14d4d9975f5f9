// Package domain holds the vocabulary every ForgeCI component shares: error
// codes, job and run states, and the lease tuple. It imports nothing of ours.
package domain

import (
	"errors"
	"fmt"
)

// Error codes from the runner protocol (DESIGN.md). The HTTP status for each
// code lives in exactly one table, in package api.
const (
	EInvalid        = "invalid_request"
	EUnauthorized   = "unauthorized"
	EForbidden      = "forbidden"
	ENotFound       = "not_found"
	ELeaseMismatch  = "lease_mismatch"
	ELeaseExpired   = "lease_expired"
	EJobFinished    = "job_finished"
	EConflict       = "conflict"
	ETooLarge       = "too_large"
	EOffsetMismatch = "offset_mismatch"
	ENotImplemented = "not_implemented"
	EUnavailable    = "unavailable"
	EInternal       = "internal"
)

// Error is an error a client may see. Message is safe to show; anything that
// is not an *Error is reported as EInternal with a generic message.
type Error struct {
	Code    string
	Message string
	// NextOffset is set with EOffsetMismatch: the current end of the log.
	NextOffset *int64
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, or EInternal when err is not an *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}
