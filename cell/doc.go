// Package cell owns the cell's membership and the ownership of queues that
// follows from it (D17): brokers that share one PostgreSQL database and
// schema and are given an advertised address form a cell.
//
// Membership lives in that database, with no consensus protocol, gossip or
// coordinator of our own: each member upserts a heartbeat row (its
// advertised address and incarnation, stamped with the database's now())
// every heartbeat, announces joins and clean leaves with NOTIFY, and
// LISTENs on a dedicated connection so that views change promptly. The live
// set is the rows younger than the member timeout.
//
// A View is an immutable snapshot of the live set, published atomically:
// readers (the server's event loops) load it without locking. Owner picks
// the owner of a (tenant, queue) by rendezvous hashing over a view's
// members, so every member computes the same owner from the same set.
//
// A member that could not renew its own row within the timeout is fenced:
// its views say so and it owns nothing until it has renewed and loaded a
// fresh view. docs/cell.md ("Membership and ownership") gives every
// decision and the measured figures.
package cell
