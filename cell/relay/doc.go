// Package relay owns the member-to-member transport of a cell (D17): a
// request that landed on a broker that does not own its queue is carried to
// the owning member together with the identity the landing member
// established (tenant and access level), and the owner's whole HTTP answer
// comes back as bytes, untouched.
//
// The transport is the frames of package link over TCP (docs/link.md),
// chosen over HTTP/2 cleartext by measurement (docs/cell-relay.md), after a
// handshake of this package's in which both ends prove knowledge of the
// cell secret (HMAC-SHA256 over two fresh nonces, compared in constant
// time); a peer that fails it is closed before any frame is read. The
// secret authenticates the peers; it does not encrypt the traffic.
//
// The package keeps the handshake and what is around it:
//
//   - Server: the relay port. It bounds the connections still in their
//     handshake (admit.go), runs the handshake, and hands every connection
//     that passed it to ServerConfig.Adopt. The broker serves the frames on
//     its event loops from then on (server.AdoptRelayConn,
//     server/relaylink.go).
//   - Dial: the handshake on the dialling side. The broker's event loops
//     dial their links to other members with it.
//   - Client: calls to members from goroutines, which the broker uses for
//     the rare fan-out of reset and delete (server/fanout.go). A few
//     connections per member carry every call, each a link.Mux after Dial's
//     handshake (the multiplexer the Go SDK's links run on too): calls
//     started together leave in one write, answers come back in any order,
//     a call in flight costs a map entry, never a goroutine, and Client.Go
//     completes through a callback.
//
// The package knows nothing of queues, HTTP or ownership: the server
// decides what to relay and what an error means for its client. Every
// error of a call wraps one of the sentinels in errors.go; all but a
// caller's own cancellation mean "the owner could not be reached" (503
// ephemeral_forward_failed), and Error.Sent applies the one rule for a
// lost answer (package link) to say whether the owner may have acted.
package relay
