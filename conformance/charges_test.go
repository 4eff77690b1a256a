package conformance

import "strings"

// The fixed charges the byte budgets count on top of payload bytes
// (docs/engine.md, "What the budgets count"; DESIGN D5). The tenant
// allowance, the broker total (QUEEN_EPHEMERAL_MAX_BYTES), the listing's
// cellBytes and the metrics' cell and tenant bytes are payload bytes plus
// these; a queue's own bytes and maxBytes stay payload bytes. They are the
// documented figures, written out here rather than taken from the engine,
// so a change to them is a change of contract these tests see.
const (
	chargeQueue     = 336 // + the queue's name
	chargePartition = 288 // + the partition's name
	chargeGroup     = 128 // + the group's name; queue mode's group is kept unnamed
	chargeCursor    = 176 // a group's place in one partition
	chargeParked    = 160 // a parked pop, until it is answered
	chargeSlot      = 24  // per ring slot, by ring capacity
	chargeEntry     = 8   // per cursor window entry, by window capacity
)

func queueCharge(name string) int64     { return chargeQueue + int64(len(name)) }
func partitionCharge(name string) int64 { return chargePartition + int64(len(name)) }

// groupCharge is the charge of a group; queue mode (a pop without group)
// is the group "".
func groupCharge(name string) int64 { return chargeGroup + int64(len(name)) }

// ringCharge is the charge of the ring of a partition that has held at
// most n messages at once: a ring is a power of two of at least 2 slots,
// doubled as it fills (engine/partition.go, reserve; it is given back only
// when an emptied ring passed 8 slots, which these tests do not reach). A
// partition created by an empty push has no ring.
func ringCharge(n int) int64 {
	if n == 0 {
		return 0
	}
	c := 2
	for c < n {
		c *= 2
	}
	return int64(c) * chargeSlot
}

// windowCharge is the charge of a cursor window that grew one entry at a
// time to n entries (n deliveries not yet compacted away): append's
// growth, a power of two at these sizes. An autoAck pop by a cursor with
// an empty window delivers without an entry.
func windowCharge(n int) int64 {
	if n == 0 {
		return 0
	}
	c := 1
	for c < n {
		c *= 2
	}
	return int64(c) * chargeEntry
}

// str is a JSON string payload of exactly n bytes as sent (n >= 2).
func str(n int) string { return `"` + strings.Repeat("x", n-2) + `"` }
