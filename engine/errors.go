package engine

import "fmt"

// Code names a refusal; the server maps each to a status and the spec's code.
type Code uint8

const (
	CodeBadRequest    Code = iota + 1 // 400 ephemeral_bad_request
	CodeQueueFull                     // 429 queue_full
	CodeQuotaExceeded                 // 403 ephemeral_quota_exceeded
	CodeUnavailable                   // 503 ephemeral_unavailable
	CodeQueueNotFound                 // 404 ephemeral_queue_not_found
	CodeClosed                        // 503 ephemeral_unavailable (engine shut down)
)

// Error is a typed refusal. Sentinels below are returned without allocating
// on the hot path; bad-request errors carry a specific message.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

var (
	ErrQueueFull     = &Error{CodeQueueFull, "the queue is at maxBytes or maxLength and its policy is reject"}
	ErrTenantBytes   = &Error{CodeQuotaExceeded, "the tenant is at its ephemeral byte allowance"}
	ErrTenantQueues  = &Error{CodeQuotaExceeded, "the tenant is at its ephemeral queue allowance"}
	ErrBrokerFull    = &Error{CodeUnavailable, "the broker is at its memory budget"}
	ErrQueueNotFound = &Error{CodeQueueNotFound, "no such ephemeral queue"}
	ErrClosed        = &Error{CodeClosed, "the broker is shutting down"}
)

func badRequest(format string, args ...any) *Error {
	return &Error{CodeBadRequest, fmt.Sprintf(format, args...)}
}

// CodeOf returns the refusal code of err, or 0 when err is not a refusal.
func CodeOf(err error) Code {
	if e, ok := err.(*Error); ok {
		return e.Code
	}
	return 0
}
