// Package link owns the frames every multiplexed hop of the broker speaks
// (docs/link.md): a client's link on the public port, the gateway's link
// to a broker, and the cell's relay between members. A link carries
// requests of the ephemeral family on streams, each answered by the whole
// HTTP answer the route would have written, in any order.
//
// The package holds the codec (frame.go: the header, the frame types, the
// refusal reasons, the request encoding) and the rule every caller
// applies when a stream ends without an answer (lost.go): whether the
// request may have been served, and so may never be sent again by itself.
// It holds the two ends a caller uses: Mux (mux.go), the client's end for
// callers on many goroutines, on which the Go SDK's links and the cell
// relay's Client (the fan-out of reset and delete) run; and Streams
// (streams.go), the calls in flight for a caller on one event loop (the
// broker's links to other members and the gateway's links to its
// brokers), with FrameReader (buffered.go), which reads frames out of an
// event loop's buffer, as every link of the broker and the gateway's links
// to its brokers do: a whole one in place, a big one still arriving into a
// buffer of its own. A payload read from a stream grows with what arrives
// (payload.go), and ToWire (wire.go) makes a request frame the HTTP
// request a route handler takes.
//
// It knows nothing of sockets' owners, identities or queues: the broker
// and the gateway serve frames on their event loops, cell/relay
// authenticates members with its handshake before speaking them, and the
// SDK upgrades an HTTP connection to them.
package link
