// Package relay owns the member-to-member transport of a cell (D17): a
// request that landed on a broker that does not own its queue is carried to
// the owning member together with the identity the landing member
// established (tenant and access level), and the owner's whole HTTP answer
// comes back as bytes, untouched.
//
// The transport is a small framed protocol over TCP, chosen over HTTP/2
// cleartext by measurement (docs/cell-relay.md). A few connections per pair
// of members carry every call, multiplexed by stream id; answers come back
// in any order. The package's Client and Server run each connection on one
// reader goroutine that dispatches frames and one writer goroutine that
// coalesces queued frames into one write. A call in flight costs a map
// entry and its buffers, never a goroutine: the owner's Handler is called
// on the reader goroutine and may answer later from anywhere (a parked
// pop), and Client.Go completes through a callback.
//
// The broker serves its relayed requests on its own event loops instead
// (server/relaylink.go): it uses Dial and ServerConfig.Adopt for the
// handshake and the frames of package link after it, and Client
// for the rare fan-out of reset and delete.
//
// A connection starts with a handshake in which both ends prove knowledge
// of the cell secret (HMAC-SHA256 over two fresh nonces, compared in
// constant time); a peer that fails it is closed before any frame is read.
// The secret authenticates the peers; it does not encrypt the traffic.
//
// The package knows nothing of queues, HTTP or ownership: the server
// decides what to relay and what an error means for its client. Every
// error of a call wraps one of the sentinels in errors.go; all but a
// caller's own cancellation mean "the owner could not be reached" (503
// ephemeral_forward_failed).
package relay
