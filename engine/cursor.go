package engine

import "github.com/queenmq/ephemeral/engine/wheel"

// Entry states of a cursor's window (D2).
const (
	stInflight  uint8 = iota // delivered under the live lease
	stRedeliver              // waiting for redelivery, before newer messages
	stSettled                // acked above the cursor, or dropped for retry
)

type entry struct {
	attempts uint32
	state    uint8
}

// cursor is one group's position in one partition (D1, D2).
//
// Everything below settled is settled for the group; next is the lowest seq
// never delivered to it. The window holds one entry per seq in
// [settled, next): len(win) == next - settled, always. At most one lease is
// live at a time, and every stInflight entry belongs to it.
type cursor struct {
	p       *partition
	g       *group
	settled uint64
	next    uint64
	win     window

	leased    bool
	leaseExp  int64
	inflight  int // stInflight entries
	redeliver int // stRedeliver entries
	dead      bool
	timer     wheel.Timer
}

// available is how many messages a pop of this group could take here now.
// A live lease makes it zero: one consumer of a group per partition (D1).
func (c *cursor) available() uint64 {
	if c.leased {
		return 0
	}
	return uint64(c.redeliver) + (c.p.tail - c.next)
}

// normalize moves the cursor up to the partition head after messages were
// freed below it. Messages it never received are counted as skipped (D5);
// entries for freed messages leave the window (an ack for one is unknown).
func (c *cursor) normalize() {
	h := c.p.head
	if c.settled >= h {
		return
	}
	k := min(h-c.settled, uint64(c.win.len()))
	for i := 0; i < int(k); i++ {
		switch c.win.at(i).state {
		case stInflight:
			c.inflight--
		case stRedeliver:
			c.redeliver--
		}
	}
	c.win.popFront(int(k))
	if c.next < h {
		c.g.skipped.Add(int64(h - c.next))
		c.next = h
	}
	c.settled = h
	if c.leased && c.inflight == 0 {
		c.releaseLease()
	}
	c.compact()
}

// compact moves settled past leading settled entries.
func (c *cursor) compact() {
	k := 0
	for k < c.win.len() && c.win.at(k).state == stSettled {
		k++
	}
	if k > 0 {
		c.win.popFront(k)
		c.moveSettled(c.settled + uint64(k))
	}
}

// moveSettled moves settled up to to and lets the partition's reclaim point
// follow (D3). Every move of a live cursor but normalize's (its caller looks
// at every cursor after) goes through here.
func (c *cursor) moveSettled(to uint64) {
	before := c.settled
	c.settled = to
	c.p.settledMoved(c, before)
}

// take delivers up to max messages to d: redeliveries first (lowest seq
// first), then new messages in order. An explicit-ack take opens a lease
// over what it delivered; an autoAck take settles at delivery.
func (c *cursor) take(limit int, autoAck bool, d Consumer, now int64) int {
	if c.leased {
		return 0
	}
	p := c.p
	n := 0 // a limit of 0 or less delivers nothing: both loops stop at once
	for i := 0; i < c.win.len() && n < limit && c.redeliver > 0; i++ {
		en := c.win.at(i)
		if en.state != stRedeliver {
			continue
		}
		seq := c.settled + uint64(i)
		c.redeliver--
		if autoAck {
			en.state = stSettled
		} else {
			en.state = stInflight
			c.inflight++
		}
		c.deliver(d, seq, en.attempts)
		n++
	}
	for n < limit && c.next < p.tail {
		seq := c.next
		c.next++
		switch {
		case autoAck && c.win.len() == 0:
			c.moveSettled(c.next) // nothing unsettled below: the cursor moves
		case autoAck:
			c.push(entry{state: stSettled})
		default:
			c.push(entry{state: stInflight})
			c.inflight++
		}
		c.deliver(d, seq, 0)
		n++
	}
	if n == 0 {
		return 0
	}
	if !autoAck {
		c.leased = true
		c.leaseExp = now + p.q.options().LeaseSeconds*1e9
		p.wh.Schedule(&c.timer, c.leaseExp, c)
	}
	c.g.lastActive.Store(now)
	c.compact()
	p.settleReclaim()
	return n
}

// push appends e to the window, charging the footprint when the window's
// capacity grows (docs/engine.md, "What the budgets count").
func (c *cursor) push(e entry) {
	if grew := c.win.push(e); grew != 0 && !c.p.q.dead.Load() {
		c.p.q.t.force(int64(grew) * c.p.q.e.charge.entry)
	}
}

// charge is what the cursor holds against the budgets: itself and its
// window's capacity.
func (c *cursor) charge() int64 {
	return c.p.q.e.charge.cursor + int64(cap(c.win.buf))*c.p.q.e.charge.entry
}

// deliver hands the message at seq to d, with its attempts so far.
func (c *cursor) deliver(d Consumer, seq uint64, attempts uint32) {
	s := c.p.slotOf(seq)
	d.Deliver(Message{Partition: c.p.name, Seq: seq, Attempts: int(attempts), Payload: c.p.payload(s)})
}

// releaseLease ends the live lease once nothing in it is unsettled.
func (c *cursor) releaseLease() {
	c.leased = false
	c.p.wh.Stop(&c.timer)
}

// dropLease voids the lease without settling anything (reset, forget).
func (c *cursor) dropLease() {
	c.dead = true
	if c.leased {
		c.releaseLease()
	}
}

// settleFailed gives a failed, retried or expired delivery its next attempt:
// redelivery, or a retry drop once attempts reaches retryLimit (D2). It
// reports whether the message was dropped.
func (c *cursor) settleFailed(en *entry) (dropped bool) {
	en.attempts++
	if int64(en.attempts) >= c.p.q.options().RetryLimit {
		en.state = stSettled
		c.p.q.countDrops(CauseRetry, 1)
		return true
	}
	en.state = stRedeliver
	c.redeliver++
	return false
}

// expire ends a lease whose time has come: every unsettled message in it
// goes back to the group with attempts + 1 (D1).
func (c *cursor) expire(now int64) bool {
	if !c.leased || c.leaseExp > now {
		return false
	}
	for i := 0; i < c.win.len() && c.inflight > 0; i++ {
		en := c.win.at(i)
		if en.state == stInflight {
			c.inflight--
			c.settleFailed(en)
		}
	}
	c.leased = false
	c.compact()
	c.p.settleReclaim()
	return true
}

// Fire is the lease timer.
func (c *cursor) Fire(now int64) {
	var done doneList
	p := c.p
	p.mu.Lock()
	if !c.dead && c.expire(now) {
		p.wakeLocked(&done)
	} else if !c.dead && c.leased {
		p.wh.Schedule(&c.timer, c.leaseExp, c) // a late fire of an older lease
	}
	p.mu.Unlock()
	done.finish()
}

// expireDue ends the lease if its time passed and the tick has not come yet,
// so a pop or ack never sees a lease that is already over.
func (c *cursor) expireDue(now int64) {
	if c.leased && c.leaseExp <= now {
		c.expire(now)
	}
}

// ack settles one delivered message of this cursor (D2).
func (c *cursor) ack(seq uint64, status AckStatus) Outcome {
	if seq < c.settled || seq >= c.next {
		return OutcomeUnknown
	}
	en := c.win.at(int(seq - c.settled))
	if en.state != stInflight || !c.leased {
		return OutcomeUnknown
	}
	c.inflight--
	out := OutcomeAcked
	if status == AckCompleted {
		en.state = stSettled
	} else if !c.settleFailed(en) {
		out = OutcomeRedelivered
	}
	if c.inflight == 0 {
		c.releaseLease()
	}
	c.compact()
	return out
}

// pendingCount is the held messages this group has not settled (D5).
func (c *cursor) pendingCount() uint64 {
	n := c.p.tail - c.settled
	for i := 0; i < c.win.len(); i++ {
		if c.win.at(i).state == stSettled {
			n--
		}
	}
	return n
}

// window is a deque of entries that reuses its backing array, so a steady
// pop/ack loop does not allocate (P3).
type window struct {
	buf []entry
	off int
}

func (w *window) len() int        { return len(w.buf) - w.off }
func (w *window) at(i int) *entry { return &w.buf[w.off+i] }
func (w *window) reset()          { w.buf, w.off = w.buf[:0], 0 }

// push appends e and returns by how many entries the capacity grew.
func (w *window) push(e entry) (grew int) {
	w.makeRoom()
	c := cap(w.buf)
	w.buf = append(w.buf, e)
	return cap(w.buf) - c
}
func (w *window) popFront(k int) {
	w.off += k
	if w.off >= len(w.buf) {
		w.reset()
	}
}

// makeRoom slides live entries down instead of growing when the free space
// is at the front.
func (w *window) makeRoom() {
	if len(w.buf) < cap(w.buf) || w.off == 0 {
		return
	}
	n := copy(w.buf, w.buf[w.off:])
	w.buf, w.off = w.buf[:n], 0
}
