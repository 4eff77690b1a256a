package engine

import "unsafe"

// What the byte budgets count (docs/engine.md, "What the budgets count").
//
// A tenant's allowance and the broker's total count payload bytes plus a
// fixed charge for every object the engine keeps for the tenant, so that
// the budget bounds the process and not only the payloads. Each charge is
// the heap one more object of that kind costs, measured with
// TestMeasureCharges (the figures and the command are in docs/engine.md),
// rounded up; names are charged on top, byte for byte.
//
// A charge is taken while the queue is live, under the lock that guards
// the object, and given back when the object goes; a queue's removal (under
// Queue.mu and every partition lock) gives back everything it still holds.
// charges is the charge of each kind of object, in bytes.
type charges struct {
	queue     int64 // a Queue and its entry in the tenant's map
	partition int64 // a partition, its place in the queue's list and index
	group     int64 // a group and its place in the queue's group list
	cursor    int64 // a group's cursor in one partition, its place in the list
	parked    int64 // a parked pop (its waiter)
	slot      int64 // one ring slot, charged by ring capacity
	entry     int64 // one cursor window entry, charged by window capacity
	perName   int64 // per byte of a kept name (1)
}

// measuredCharges are the figures in force; each is the heap one more
// object of the kind costs, rounded up (docs/engine.md, "What the budgets
// count", has the measurement and its command). A message costs its payload
// plus at least one ring slot. A lease has no object of its own (its timer
// is part of the cursor); its messages are entries of the cursor's window.
var measuredCharges = charges{
	queue:     336,
	partition: 304,
	group:     128,
	cursor:    208,
	parked:    160,
	slot:      int64(unsafe.Sizeof(slot{})),
	entry:     int64(unsafe.Sizeof(entry{})),
	perName:   1,
}

func (c *charges) ofQueue(name string) int64     { return c.queue + c.perName*int64(len(name)) }
func (c *charges) ofPartition(name string) int64 { return c.partition + c.perName*int64(len(name)) }
func (c *charges) ofGroup(name string) int64     { return c.group + c.perName*int64(len(name)) }

// reserve adds n bytes to the tenant's footprint and the broker's, unless
// that passes the tenant's allowance (ErrTenantBytes) or the broker's total
// (ErrBrokerFull), in that order (D7). Reclaimable messages are freed before
// either refuses (D3). It takes no lock: call it with none held.
func (t *tenant) reserve(n int64) error {
	var tried reclaimScope
	for {
		scope, err := t.tryReserve(n, 0, 0, tried)
		if scope == reclaimNone {
			return err
		}
		tried |= scope
		t.e.reclaimIn(scope, nil, t)
	}
}

// tryReserve is one attempt of reserve. credit is what the caller frees at
// once after it is admitted (a dropOldest push's drops), headroom what it
// charges by itself right after (ring growth): a reservation that adds no
// more than it frees is always admitted. When a refusal could be avoided by
// freeing reclaimable messages not yet tried, it returns that scope instead.
func (t *tenant) tryReserve(n, credit, headroom int64, tried reclaimScope) (reclaimScope, error) {
	e := t.e
	grows := n+headroom > credit
	tb := t.footprint.Add(n)
	if m := t.maxBytes.Load(); m > 0 && grows && tb+headroom-credit > m {
		t.footprint.Add(-n)
		if t.reclaimableMsgs.Load() > 0 && tried&reclaimTenant == 0 {
			return reclaimTenant, nil
		}
		return reclaimNone, ErrTenantBytes
	}
	if eb := e.footprint.Add(n); grows && eb+e.sealSlack()+headroom-credit > e.cfg.MaxBytes {
		e.footprint.Add(-n)
		t.footprint.Add(-n)
		if e.reclaimableMsgs.Load() > 0 && tried&reclaimBroker == 0 {
			return reclaimBroker, nil
		}
		e.refusedAtTotal() // the room may be slack that moving survivors gives back
		return reclaimNone, ErrBrokerFull
	}
	return reclaimNone, nil
}

// force adds n (negative: gives back) to the footprint without a check: for
// memory that follows from something already admitted (a cursor, a ring or
// window that grew) and for releases.
func (t *tenant) force(n int64) {
	if n != 0 {
		t.footprint.Add(n)
		t.e.footprint.Add(n)
	}
}

// wouldFit reports, without reserving, whether n more bytes fit the
// tenant's allowance and the broker's total, freeing reclaimable messages
// first when they could make the room (D3).
func (t *tenant) wouldFit(n int64) error {
	if err := t.reserve(n); err != nil {
		return err
	}
	t.force(-n)
	return nil
}

// Charge adds n bytes that live outside the engine (the server's
// connections) to the broker's footprint, so the broker total bounds them
// too. It never refuses: what it counts exists already, and a connection is
// how a consumer drains a full broker; pushes and creations past the total
// are refused sooner instead. They count against no tenant. Give them back
// with Release.
func (e *Engine) Charge(n int64) { e.footprint.Add(n) }

// Release gives back n bytes taken with Charge.
func (e *Engine) Release(n int64) { e.footprint.Add(-n) }

// accountReclaimable moves the count of reclaimable messages of a queue, its
// tenant and the broker by n. A reclaim pass is worth making while the count
// is above 0, whether or not the messages hold payload bytes: freeing empty
// ones gives back their ring slots too (D3).
func (q *Queue) accountReclaimable(n int64) {
	if n != 0 {
		q.reclaimableMsgs.Add(n)
		q.t.reclaimableMsgs.Add(n)
		q.e.reclaimableMsgs.Add(n)
	}
}

// accountFreed is accountBytes(-bytes, -reclaimable) for bytes freed, with
// the change in the arena's slack those frees made (arena.Free), which the
// broker's footprint counts and no tenant's: one write of the broker's
// footprint for both.
func (q *Queue) accountFreed(bytes, reclaimable, slack int64) {
	if !q.e.countSlack {
		slack = 0
	}
	if bytes != 0 {
		q.bytes.Add(-bytes)
		q.t.footprint.Add(-bytes)
	}
	if slack != bytes {
		q.e.footprint.Add(slack - bytes)
	}
	if reclaimable != 0 {
		q.reclaimableBytes.Add(-reclaimable)
		q.t.reclaimableBytes.Add(-reclaimable)
		q.e.reclaimableBytes.Add(-reclaimable)
	}
}

// accountBytes moves the payload gauges of a queue, and the footprint of
// its tenant and the broker.
func (q *Queue) accountBytes(held, reclaimable int64) {
	if held != 0 {
		q.bytes.Add(held)
		q.t.force(held)
	}
	if reclaimable != 0 {
		q.reclaimableBytes.Add(reclaimable)
		q.t.reclaimableBytes.Add(reclaimable)
		q.e.reclaimableBytes.Add(reclaimable)
	}
}
