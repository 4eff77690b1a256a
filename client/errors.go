package client

import (
	"errors"
	"fmt"
	"time"
)

// The codes of the specification's closed refusal taxonomy, plus
// CodeUnsupported, which the SDK reports for a 404 from any route but the
// depth read. The same list is Codes in the JavaScript SDK (clients/js),
// checked by TestCodesMatchJS.
//
// CodeOwnerMoved and CodeForwardFailed come only from a cell of several
// brokers, and say the request was not applied: the client sends such a
// call again by itself, with backoff, within the call's bounds
// (docs/sdk-transport.md, "Cell refusals"); the refusal is returned only
// when those bounds end first.
const (
	CodeBadRequest      = "ephemeral_bad_request"
	CodeQuotaExceeded   = "ephemeral_quota_exceeded"
	CodeFeatureGated    = "feature_gated"
	CodeQueueNotFound   = "ephemeral_queue_not_found"
	CodeQueueFull       = "queue_full"
	CodeRateLimited     = "rate_limited"
	CodeConfigureFailed = "ephemeral_configure_failed"
	CodeDeleteFailed    = "ephemeral_delete_failed"
	CodeUnavailable     = "ephemeral_unavailable"
	CodeOwnerMoved      = "owner_moved"
	CodeForwardFailed   = "ephemeral_forward_failed"
	CodeDisabled        = "ephemeral_disabled"
	CodeUnsupported     = "ephemeral_unsupported"
)

// Values to compare with errors.Is: an *Error matches one of these when its
// Code is the same (the status and message are not compared).
var (
	ErrBadRequest      = &Error{Code: CodeBadRequest}
	ErrQuotaExceeded   = &Error{Code: CodeQuotaExceeded}
	ErrFeatureGated    = &Error{Code: CodeFeatureGated}
	ErrQueueNotFound   = &Error{Code: CodeQueueNotFound}
	ErrQueueFull       = &Error{Code: CodeQueueFull}
	ErrRateLimited     = &Error{Code: CodeRateLimited}
	ErrConfigureFailed = &Error{Code: CodeConfigureFailed}
	ErrDeleteFailed    = &Error{Code: CodeDeleteFailed}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrOwnerMoved      = &Error{Code: CodeOwnerMoved}
	ErrForwardFailed   = &Error{Code: CodeForwardFailed}
	ErrDisabled        = &Error{Code: CodeDisabled}
	ErrUnsupported     = &Error{Code: CodeUnsupported}
)

// ErrClosed is returned by calls made after [Client.Close] began.
var ErrClosed = errors.New("queen: client closed")

// ErrRequestTimeout is returned by [Client.Request] when no reply arrived
// within the timeout.
var ErrRequestTimeout = errors.New("queen: request timed out waiting for a reply")

// Error is a refusal answered by the broker: a non-2xx status with the
// body {"error": "...", "code": "..."}.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the specification's code (CodeQueueFull, ...). It is
	// CodeUnsupported for a 404 from any route but the depth read, and
	// empty when the body carried none.
	Code string
	// Message is the broker's prose, for a human reading a log.
	Message string
	// RetryAfter is the Retry-After header, zero when there was none.
	RetryAfter time.Duration
	// Attempts is how many times the call was sent: 1, or more for a
	// cell refusal (CodeOwnerMoved, CodeForwardFailed) that the client
	// retried until the call's bounds ended.
	Attempts int
	// Method and Path name the request that was refused.
	Method, Path string
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return "queen: " + e.Code
	}
	return fmt.Sprintf("queen: %s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// Is reports whether target is an *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Status == 0 || t.Status == e.Status)
}

// Temporary reports whether the refusal says "come back later": a 429 or
// a 503.
func (e *Error) Temporary() bool { return e.Status == 429 || e.Status == 503 }

// CodeOf returns the code of the *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// FlushError reports buffered messages that could not be delivered: the
// last refusal (or transport error) of the flush that gave up. The
// messages it counts are not in the broker.
type FlushError struct {
	Queue, Partition string
	// Messages is how many buffered messages were not delivered.
	Messages int
	Err      error
}

func (e *FlushError) Error() string {
	return fmt.Sprintf("queen: buffered push to %q (partition %q): %d messages not delivered: %v", e.Queue, e.Partition, e.Messages, e.Err)
}

func (e *FlushError) Unwrap() error { return e.Err }
