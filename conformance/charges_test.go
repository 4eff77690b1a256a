package conformance

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// The fixed charges the byte budgets count on top of payload bytes
// (docs/engine.md, "What the budgets count", D5). The tenant
// allowance, the broker total (QUEEN_EPHEMERAL_MAX_BYTES), the listing's
// cellBytes and the metrics' cell and tenant bytes are payload bytes plus
// these; a queue's own bytes and maxBytes stay payload bytes. They are the
// documented figures, written out here rather than taken from the engine,
// so a change to them is a change of contract these tests see.
const (
	chargeQueue     = 336 // + the queue's name
	chargePartition = 304 // + the partition's name
	chargeGroup     = 128 // + the group's name; queue mode's group is kept unnamed
	chargeCursor    = 208 // a group's place in one partition
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

// TestConnectionsCharged: every open connection counts
// QUEEN_CONNECTION_CHARGE_BYTES against the broker total and in cellBytes,
// and gives it back when it closes (docs/server.md, accepting connections);
// a connection is never refused for it, and the push that the connections
// leave no room for is refused with 503 ephemeral_unavailable (D7).
func TestConnectionsCharged(t *testing.T) {
	t.Parallel()
	const charge = 4096
	b := startBroker(t, map[string]string{
		"QUEEN_CONNECTION_CHARGE_BYTES": strconv.Itoa(charge),
		"QUEEN_EPHEMERAL_MAX_BYTES":     strconv.Itoa(24 * charge),
	})
	base := b.queues(t).CellBytes // the harness client's own connections
	if base%charge != 0 || base < charge {
		t.Fatalf("cellBytes %d with no queue, want a whole number (at least 1) of connection charges", base)
	}
	var conns []*rawConn
	for i := 0; i < 30; i++ { // past the total: every one is still served
		c := b.dial(t)
		c.send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
		if r, err := c.readWithin(5 * time.Second); err != nil || r.status != 200 {
			t.Fatalf("connection %d: %v %v", i, r, err)
		}
		conns = append(conns, c)
	}
	if got := b.queues(t).CellBytes; got != base+30*charge {
		t.Fatalf("cellBytes %d with 30 more connections, want %d", got, base+30*charge)
	}
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("q", "", "1")).wantErr(t, 503, "ephemeral_unavailable")
	for _, c := range conns[:20] {
		c.c.Close()
	}
	want := base + 10*charge
	deadline := time.Now().Add(5 * time.Second)
	for b.queues(t).CellBytes != want {
		if time.Now().After(deadline) {
			t.Fatalf("cellBytes %d after 20 connections closed, want %d", b.queues(t).CellBytes, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.push(t, "q", "", "1") // room again
}

// wantCellBytes reads the listing and requires its cellBytes to be want
// (when says at which step, for the message); it returns the listing.
func (b *broker) wantCellBytes(t *testing.T, want int64, when string) listing {
	t.Helper()
	l := b.queues(t)
	if l.CellBytes != want {
		t.Fatalf("cellBytes %d %s, want %d", l.CellBytes, when, want)
	}
	return l
}
