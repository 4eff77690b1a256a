// Package wire is the broker's HTTP/1.1 and JSON layer: an incremental
// request parser over the byte slices an event loop hands it, response
// writing by appending into reused buffers, and decoders for the route
// bodies (push, ack, configure, and the system bodies) and the pop query.
//
// The wire knows nothing of queues (docs/decisions.md, layout): it refuses bad
// shapes with precise messages and hands the server plain values, which the
// server maps onto the engine's types. It never imports the engine.
//
// Memory. Nothing here allocates per request or per message in steady
// state (P3): a Request's method, target, header values and body are
// sub-slices of the caller's buffer (or of a reused de-chunking buffer), a
// push payload is a sub-slice of the body and is never decoded (P2), and
// strings that carry escapes are decoded into a reused scratch arena. Every
// slice handed out is therefore valid only until the next call on the value
// that produced it, and only while the caller's buffer is untouched.
//
// Refusals are *Error values carrying the status, the error code (docs/routes.md), a
// message for a human, and whether the connection must close.
package wire
