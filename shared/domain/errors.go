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
	// Details locate each problem when the message sums up several (an
	// invalid pipeline file).
	Details []Detail
	// Status is the HTTP status the error came with, when a client decoded
	// it from an answer (protocol.DecodeError); 0 on the server.
	Status int
}

// Detail is one located problem: file:line:column, the path of the key
// (jobs.build.steps[0].run) and what is wrong there.
type Detail struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (d Detail) String() string {
	return fmt.Sprintf("%s:%d:%d: %s: %s", d.File, d.Line, d.Column, d.Path, d.Message)
}

// Error is the code and message (with the HTTP status when the error was
// decoded from an answer), then each detail on its own line.
func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.Status != 0 {
		s = fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code)
	}
	for _, d := range e.Details {
		s += "\n  " + d.String()
	}
	return s
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Is reports whether err is an *Error with one of codes.
func Is(err error, codes ...string) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// ErrorCode returns the code of err, or EInternal when err is not an *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}
