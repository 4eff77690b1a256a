package server

import (
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// loopHTTP is the HTTP connections' part of a loop's state (loop.go).
//
// It holds the decoders and buffers a request borrows while it is served
// (P3). A loop serves one request at a time, and nothing served off the
// loop keeps any of them (the async paths copy what they need), so one set
// per loop is enough: a connection does not carry its own, and a large ack
// or listing does not leave its grown buffers on an idle connection. A
// stand-in (standin.go) borrows them as a connection does.
type loopHTTP struct {
	push     wire.PushBody
	ack      wire.AckBody
	conf     wire.ConfigureBody
	ackItems []engine.AckItem
	outcomes []engine.Outcome
	depth    engine.DepthInfo
	queues   []engine.QueueInfo
	scratch  []byte // an answer's body is built here

	// parsers lends parsers to this loop's connections (wire.ParserPool).
	parsers wire.ParserPool

	// The connections of this loop stopped for their unread answers
	// (conn.throttle; loopState.checkThrottled looks at them).
	throttled []*conn
	spare     []*conn
}
