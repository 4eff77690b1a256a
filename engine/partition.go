package engine

import (
	"sync"

	"github.com/queenmq/ephemeral/arena"
	"github.com/queenmq/ephemeral/engine/wheel"
)

// slot is one held message: a pointer-free handle to its payload and the
// time it was pushed (for ttl). Rings of slots are never scanned by the GC.
type slot struct {
	h  arena.Handle
	at int64
}

// partition is one (queue, partition) ring with its group cursors.
//
// Invariants (all under mu): held messages are seqs [head, tail), the slot of
// seq s is ring[s&(len(ring)-1)]. reclaim only moves forward (D3), and
// never lags head; seqs in [head, reclaim) are reclaimable, the rest pending. Every cursor has
// head <= settled <= next <= tail once normalized, and cursors are
// normalized whenever head moves.
type partition struct {
	q    *Queue
	name string
	hint uint64       // arena shard and wheel shard
	wh   *wheel.Wheel // leases, ttl and parked pops of this partition

	mu         sync.Mutex
	head, tail uint64
	reclaim    uint64
	ring       []slot
	bytes      int64
	cursors    []*cursor
	byGroup    map[*group]*cursor // the cursors by group, from cursorIndexAt cursors on
	holders    int                // live cursors at or below the reclaim point (settledMoved)
	reclaimDue bool               // no cursor holds the point any more: settleReclaim moves it
	waiters    waitList           // parked pops that named this partition
	ttlAt      int64              // when the ttl timer is armed for, 0 = not armed
	ttlTimer   wheel.Timer
}

func newPartition(q *Queue, name string) *partition {
	start := q.e.seqFloor.Load()
	p := &partition{q: q, name: name, head: start, tail: start, reclaim: start}
	p.hint = q.e.nextHint.Add(1)
	p.wh = q.e.wheels.Shard(p.hint)
	return p
}

func (p *partition) held() uint64 { return p.tail - p.head }

// pending is the number of messages at or above the reclaim point (D5).
func (p *partition) pending() uint64 { return p.tail - max(p.head, p.reclaim) }

func (p *partition) slotOf(seq uint64) *slot { return &p.ring[seq&uint64(len(p.ring)-1)] }

// payload is the message's bytes; an empty payload's zero-length handle
// reads as nil.
func (p *partition) payload(s *slot) []byte { return p.q.e.arena.Bytes(s.h) }

// ringSize is the ring's size once it has room for n more slots: the size it
// has when they fit, else the first power of two (2 at least) that holds them.
func (p *partition) ringSize(n int) int { return ringSizeFor(len(p.ring), p.held()+uint64(n)) }

// ringSizeFor is the size a ring of size slots has once it holds need: size
// when they fit, else the first power of two (2 at least) that holds them.
func ringSizeFor(size int, need uint64) int {
	if need > uint64(size) {
		size = max(size, 2)
		for uint64(size) < need {
			size *= 2
		}
	}
	return size
}

// reserve makes room in the ring for n more slots.
func (p *partition) reserve(n int) {
	if size := p.ringSize(n); size != len(p.ring) {
		p.resize(size)
	}
}

// ringGrowth is the bytes reserve(n) would add to the ring: a push counts
// them against the budgets before it appends.
func (p *partition) ringGrowth(n int) int64 {
	return int64(p.ringSize(n)-len(p.ring)) * p.q.e.charge.slot
}

func (p *partition) resize(size int) {
	next := make([]slot, size)
	for s := p.head; s < p.tail; s++ {
		next[s&uint64(size-1)] = *p.slotOf(s)
	}
	p.setRing(next)
}

// setRing replaces the ring and moves the footprint by the change in its
// capacity (docs/engine.md, "What the budgets count"). A dead queue gave
// back everything it held when it died, so it charges nothing more.
func (p *partition) setRing(r []slot) {
	if !p.q.dead.Load() {
		p.q.t.force(int64(len(r)-len(p.ring)) * p.q.e.charge.slot)
	}
	p.ring = r
}

// append copies payloads (nb bytes in all) into the arena, one allocation
// for the batch, and appends their slots. The queue, tenant and broker
// gauges are the caller's (push reserves them before it appends).
func (p *partition) append(payloads [][]byte, nb int64, at int64) {
	p.reserve(len(payloads))
	var h arena.Handle
	var buf []byte
	if nb > 0 {
		h, buf = p.q.e.arena.Alloc(p.hint, int(nb))
	}
	off := 0
	mask := uint64(len(p.ring) - 1)
	for _, pl := range payloads {
		// An empty payload gets a zero-length handle: Bytes reads it as
		// nil and Free ignores it.
		copy(buf[off:], pl)
		p.ring[p.tail&mask] = slot{h: h.Sub(uint32(off), uint32(len(pl))), at: at}
		off += len(pl)
		p.tail++
	}
	p.bytes += nb
}

// freeHead frees the k oldest held messages. Reclaimable ones are freed
// silently; pending ones are drops counted under cause (causeNone for reset
// and delete). Cursors are normalized, so groups below the freed range skip
// it and count what they never received. It returns the pending dropped.
func (p *partition) freeHead(k uint64, cause Cause) (dropped uint64) {
	k = min(k, p.held())
	if k == 0 {
		return 0
	}
	p.ensureCursors() // so a group that never read here counts its skips
	e := p.q.e
	var bytes, rbytes, rcount, slack int64
	for i := uint64(0); i < k; i++ {
		s := p.slotOf(p.head)
		slack += e.arena.Free(s.h) // an empty payload's zero-length handle is ignored
		n := int64(s.h.Len)
		bytes += n
		if p.head < p.reclaim {
			rbytes += n
			rcount++
		} else {
			dropped++
		}
		*s = slot{}
		p.head++
	}
	// The point never lags the head: what is below the head is gone, and a
	// cursor created at the head must count as holding the point
	// (cursorFor, settledMoved), or its first settle would not move it.
	p.reclaim = max(p.reclaim, p.head)
	p.bytes -= bytes
	q := p.q
	q.length.Add(-int64(k))
	q.accountReclaimable(-rcount)
	q.accountFreed(bytes, rbytes, slack)
	if cause != causeNone {
		q.countDrops(cause, int64(dropped))
	}
	for _, c := range p.cursors {
		c.normalize()
	}
	p.updateReclaim() // normalize moved cursors without settledMoved
	p.shrink()
	return dropped
}

// shrink gives memory back after a burst.
func (p *partition) shrink() {
	if len(p.ring) > 64 && p.held() < uint64(len(p.ring))/8 {
		p.resize(max(8, len(p.ring)/4))
	}
	if p.held() == 0 && len(p.ring) > 8 {
		p.setRing(nil)
	}
}

// updateReclaim moves the reclaim point up to the lowest settled cursor (D3).
//
// Every group that exists counts, including one that has no cursor here yet:
// it would start at the oldest message held, so it holds the point where it
// is. Before any group exists the point stays at the start.
func (p *partition) updateReclaim() {
	p.reclaimDue = false
	live := 0
	m := p.tail
	for _, c := range p.cursors {
		if !c.g.dead.Load() {
			live++
			m = min(m, c.settled)
		}
	}
	if live == 0 || live < len(p.q.groupList()) {
		p.holders = 0 // unknown: the next move of a cursor looks again
		return
	}
	if m > p.reclaim {
		var n, bytes int64
		for s := max(p.reclaim, p.head); s < m; s++ {
			n++
			bytes += int64(p.slotOf(s).h.Len)
		}
		p.reclaim = m
		p.q.accountReclaimable(n)
		p.q.accountBytes(0, bytes)
		p.q.noteReclaimable()
	}
	p.holders = 0
	for _, c := range p.cursors {
		if !c.g.dead.Load() && c.settled <= p.reclaim {
			p.holders++
		}
	}
}

// settledMoved runs after c.settled moved up from before. The reclaim point
// is the lowest settled of the live cursors, so it can move only when c held
// it (was at or below it), no longer does, and no other cursor holds it;
// then the operation's end (settleReclaim) moves it. Every other move costs
// nothing instead of a pass over the cursors of every group here, which made
// a pop or an ack cost grow with the number of groups (docs/engine.md, "Push
// cost does not grow"). holders may count too few (then updateReclaim runs
// early and counts again), never too many: a cursor moved by any other path
// is followed by updateReclaim.
func (p *partition) settledMoved(c *cursor, before uint64) {
	if before > p.reclaim || c.settled <= p.reclaim {
		return
	}
	p.holders--
	if p.holders <= 0 {
		p.reclaimDue = true
	}
}

// settleReclaim moves the reclaim point if a cursor let go of it during the
// operation that is ending (a pop, an ack call, a lease expiry): once per
// operation rather than once per message a batch settles.
func (p *partition) settleReclaim() {
	if p.reclaimDue {
		p.updateReclaim()
	}
}

// cursorIndexAt is the number of cursors from which a partition finds them
// through a map rather than by scanning its list.
const cursorIndexAt = 8

// cursorFor returns g's cursor here, creating it at the oldest message held
// (D4: a new group starts there).
func (p *partition) cursorFor(g *group) *cursor {
	if c := p.findCursor(g); c != nil {
		return c
	}
	c := &cursor{p: p, g: g, settled: p.head, next: p.head}
	p.cursors = append(p.cursors, c)
	switch {
	case p.byGroup != nil:
		p.byGroup[g] = c
	case len(p.cursors) >= cursorIndexAt:
		p.byGroup = make(map[*group]*cursor, 2*len(p.cursors))
		for _, x := range p.cursors {
			p.byGroup[x.g] = x
		}
	}
	if c.settled <= p.reclaim {
		p.holders++ // it starts at the oldest message held: it holds the point
	}
	if !p.q.dead.Load() {
		// Forced: a cursor follows from a group and a partition that were
		// admitted; a dead queue gave back everything when it died.
		p.q.t.force(p.q.e.charge.cursor)
	}
	return c
}

// ensureCursors gives every live group of the queue a cursor here, at the
// oldest message held, where its first pop would start (D4).
func (p *partition) ensureCursors() {
	groups := p.q.groupList()
	if len(p.cursors) >= len(groups) {
		live := 0
		for _, c := range p.cursors {
			if !c.g.dead.Load() {
				live++
			}
		}
		if live >= len(groups) {
			return
		}
	}
	for _, g := range groups {
		if !g.dead.Load() {
			p.cursorFor(g)
		}
	}
}

// findCursor returns g's cursor here, or nil.
func (p *partition) findCursor(g *group) *cursor {
	if p.byGroup != nil {
		return p.byGroup[g]
	}
	for _, c := range p.cursors {
		if c.g == g {
			return c
		}
	}
	return nil
}

// removeDeadCursors forgets the cursors of groups that were forgotten, in
// one pass, and gives back their charges, unless the queue's death gave
// them back already.
func (p *partition) removeDeadCursors() {
	kept := p.cursors[:0]
	var n int64
	for _, c := range p.cursors {
		if !c.g.dead.Load() {
			kept = append(kept, c)
			continue
		}
		c.dropLease()
		n += c.charge()
		delete(p.byGroup, c.g) // nil below cursorIndexAt: a no-op
	}
	clear(p.cursors[len(kept):])
	p.cursors = kept
	if !p.q.dead.Load() {
		p.q.t.force(-n)
	}
	p.updateReclaim()
}

// release gives back everything p holds against the budgets but payload
// bytes (freeHead gives those back): its own charge, its ring and its
// cursors. p.mu is held; the queue is dying, so nothing charges again.
func (p *partition) release() {
	n := p.q.e.charge.ofPartition(p.name) + int64(len(p.ring))*p.q.e.charge.slot
	for _, c := range p.cursors {
		n += c.charge()
	}
	p.q.t.force(-n)
}

// armTTL schedules the ttl timer for the head message when ttl is on.
func (p *partition) armTTL() {
	ttl := p.q.options().TTLSeconds
	if ttl <= 0 || p.held() == 0 {
		if p.ttlAt != 0 {
			p.wh.Stop(&p.ttlTimer)
			p.ttlAt = 0
		}
		return
	}
	at := p.slotOf(p.head).at + ttl*1e9
	if p.ttlAt == at {
		return
	}
	p.ttlAt = at
	p.wh.Schedule(&p.ttlTimer, at, p)
}

// Fire drops messages older than ttlSeconds, consumed or not.
func (p *partition) Fire(now int64) {
	var done doneList
	p.mu.Lock()
	p.ttlAt = 0
	p.expireTTL(now)
	p.armTTL()
	p.wakeLocked(&done)
	p.mu.Unlock()
	done.finish()
}

func (p *partition) expireTTL(now int64) {
	ttl := p.q.options().TTLSeconds
	if ttl <= 0 || p.q.dead.Load() {
		return
	}
	limit := now - ttl*1e9
	var k uint64
	for s := p.head; s < p.tail && p.slotOf(s).at <= limit; s++ {
		k++
	}
	p.freeHead(k, CauseTTL)
}
