package server

import (
	"errors"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

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
