package server

// Refusals: every error answer of the server is written by appendError,
// which counts it by code; refuse and errorAnswer are its shorthands on and
// off the loop, and refusal maps engine and wire errors to the wire's.

import (
	"errors"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/wire"
)

// refuse appends an error answer for req.
func (cs *conn) refuse(req *wire.Request, err error) {
	cs.out = cs.s.appendError(cs.out, cs.head(req, 0), refusal(err))
}

// refusal turns an engine or wire error into the wire's error value.
func refusal(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		switch ee.Code {
		case engine.CodeBadRequest:
			return &wire.Error{Status: 400, Code: codeBadRequest, Msg: ee.Msg}
		case engine.CodeQueueFull:
			return &wire.Error{Status: 429, Code: codeQueueFull, Msg: ee.Msg}
		case engine.CodeQuotaExceeded:
			return &wire.Error{Status: 403, Code: codeQuotaExceeded, Msg: ee.Msg}
		case engine.CodeQueueNotFound:
			return &wire.Error{Status: 404, Code: codeNotFound, Msg: ee.Msg}
		case engine.CodeUnavailable, engine.CodeClosed:
			return &wire.Error{Status: 503, Code: codeUnavailable, Msg: ee.Msg}
		}
	}
	return &wire.Error{Status: 500, Code: codeInternal, Msg: err.Error()}
}

// Refusals the server itself makes, allocated once.
var (
	errNoRoute = &wire.Error{Status: 404, Code: codeNoRoute, Msg: "no such route"}
	errMethod  = &wire.Error{Status: 405, Code: codeMethod, Msg: "this route does not take that method"}
	// An empty :queue path segment (DELETE .../queue/, GET .../queues//depth).
	errEmptyPathQueue = &wire.Error{Status: 400, Code: codeBadRequest, Msg: "the queue name in the path is empty; a queue name is 1 to 512 bytes"}
)

// appendError appends an error answer and counts the refusal by its code.
// Every error answer of the server goes through here.
//
// 503 ephemeral_forward_failed carries Retry-After: 1, as the kill
// switch's 503 carries its own (docs/cell.md, "SDKs"): the owner is
// unreachable, and a dead one is replaced within a member timeout
// (seconds). 503 owner_moved carries none: the views settle within a
// heartbeat, and the SDKs' backoff (from 10 ms) reaches the new owner
// sooner than a whole second would. Set here, so that every place that
// refuses with forward_failed, relay and fan-out alike, answers the same.
func (s *Server) appendError(dst []byte, head wire.Head, we *wire.Error) []byte {
	s.m.refused(we.Code)
	if we.Code == codeForwardFailed && head.RetryAfter <= 0 {
		head.RetryAfter = cellRetryAfter
	}
	return wire.AppendError(dst, head, we)
}

// cellRetryAfter is the Retry-After, in seconds, of 503
// ephemeral_forward_failed: the smallest the header can say.
const cellRetryAfter = 1

// errorAnswer is appendError into a new buffer, for answers made off the
// loop.
func (s *Server) errorAnswer(head wire.Head, status int, code, msg string) []byte {
	return s.appendError(nil, head, &wire.Error{Status: status, Code: code, Msg: msg})
}

// storeFailure answers a failed store call: no connection in time is 503
// ephemeral_unavailable (the spec's rule for declaration writes); any other
// failure is a 500 with the caller's code.
func (s *Server) storeFailure(head wire.Head, err error, code, msg string) []byte {
	if errors.Is(err, store.ErrUnavailable) {
		return s.errorAnswer(head, 503, codeUnavailable, "no database connection was available")
	}
	return s.errorAnswer(head, 500, code, msg)
}
