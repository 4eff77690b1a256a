package wire

import (
	"fmt"
	"strconv"
)

// Error codes used by this package, and the two of identity, which both the
// broker (server) and package identity answer: their one definition lives
// here, beside Error, where every package that refuses can reach it. The
// code is the contract clients branch on (spec, status codes); the message
// is prose for a log.
const (
	// CodeBadRequest is the ephemeral family's shape refusal (400).
	CodeBadRequest = "ephemeral_bad_request"
	// CodeSystemBadRequest is the system routes' shape refusal (400, D15).
	CodeSystemBadRequest = "bad_request"
	// CodeUnauthorized is a missing or invalid credential (401, D14).
	CodeUnauthorized = "unauthorized"
	// CodeForbidden is a credential whose level or scope does not allow
	// the route (403, D14).
	CodeForbidden = "forbidden"
)

// Error is a refusal: the server answers Status with the body
// {"error": Msg, "code": Code}, and closes the connection when Close is set
// (every framing error does, because the rest of the stream cannot be
// trusted to start at a request boundary).
type Error struct {
	Status int
	Code   string
	Msg    string
	Close  bool
}

func (e *Error) Error() string { return e.Msg }

// framingError is a 400 that closes the connection: the request could not
// be delimited, so nothing after it can be read.
func framingError(format string, args ...any) *Error {
	return &Error{Status: 400, Code: CodeBadRequest, Msg: fmt.Sprintf(format, args...), Close: true}
}

// shapeError is a 400 about a well-framed request: the connection stays
// usable.
func shapeError(code, format string, args ...any) *Error {
	return &Error{Status: 400, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// quote renders client bytes for a message, bounded so that a refusal
// cannot echo a whole header or body back.
func quote(b []byte) string {
	const most = 64
	if len(b) > most {
		return strconv.Quote(string(b[:most])) + "..."
	}
	return strconv.Quote(string(b))
}
