// Package engine owns the in-memory contents of ephemeral queues: tenants,
// queues, partitions and their rings, consumer-group cursors, leases, byte
// budgets and the timing wheel that drives expiry. It knows nothing of HTTP,
// JSON or SQL; the server calls its verbs (Push, Pop, Ack, Configure, Reset,
// Delete, Queues, Depth) and maps its typed refusals onto status codes. Of
// the cell it knows only what an ownership move asks of it (DropForMove,
// DropMoved): who owns what is decided in cell/.
//
// Locking, outermost first: Queue.mu (declaration, groups, partition table),
// then partition.mu (ring, cursors, partition waiters), then Queue.waitMu
// (wildcard waiters). Nothing holds a partition lock while taking another
// partition's lock, except remove and an ownership move, which take every
// partition lock of the queue they kill, in list order, under Queue.mu. A
// move replaces a declared queue in its tenant's map under those locks; no
// map callback takes an engine lock. Counters read by the status routes are
// atomics (P4).
//
// Payload bytes live in an arena (P2, P3): a ring slot holds a pointer-free
// handle, and a pop copies the bytes into the caller's buffer while the
// partition lock is held, so a handle is never read after it is freed.
//
// Names passed to the verbs may be views of a request buffer: the engine
// copies the ones it keeps (tenant, queue, partition and group names) and
// uses the rest only during the call.
package engine
