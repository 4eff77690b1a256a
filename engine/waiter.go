package engine

import (
	"sync/atomic"

	"github.com/queenmq/ephemeral/engine/wheel"
)

const (
	waiting uint32 = iota
	claimed        // taken off its list by exactly one party, who completes it
)

// waiter is a parked pop. It lives on one list: its partition's (p.mu) or,
// without a partition, its queue's (q.waitMu). Whoever moves state from
// waiting to claimed owns it: unlinks it, delivers to it and completes it.
type waiter struct {
	q        *Queue
	p        *partition // nil: any partition
	g        *group
	c        Consumer
	batch    int
	autoAck  bool
	deadline int64

	// windowEnd is set when the first message arrives and a window buffer is
	// configured: the pop waits until then for more (D12). 0 = not yet.
	windowEnd atomic.Int64
	state     atomic.Uint32
	timer     wheel.Timer
	wh        *wheel.Wheel

	prev, next *waiter
	listed     bool
}

// waitList is an intrusive FIFO of parked pops.
type waitList struct {
	head, tail *waiter
}

func (l *waitList) add(w *waiter) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	w.listed = true
}

func (l *waitList) remove(w *waiter) {
	if !w.listed {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next, w.listed = nil, nil, false
}

// park puts w on its list, after one more look under the list's lock so a
// push that raced the first look is not missed. It returns what it took when
// that look found messages (and parked is false then).
func (w *waiter) park(now int64) (n int, parked bool) {
	q := w.q
	if w.wh == nil {
		w.wh = q.e.wheels.Shard(q.e.nextHint.Add(1))
		q.parked.Add(1)
		w.g.parked.Add(1)
	}
	w.state.Store(waiting)
	if w.p != nil {
		p := w.p
		p.mu.Lock()
		if q.dead.Load() {
			p.mu.Unlock()
			w.unpark(now)
			return 0, false
		}
		if n = p.takeFor(w, w.batch, now); n > 0 {
			p.mu.Unlock()
			w.unpark(now)
			return n, false
		}
		p.waiters.add(w)
		w.wh.Schedule(&w.timer, w.deadline, w)
		p.mu.Unlock()
		return 0, true
	}
	q.waitMu.Lock()
	q.waiters.add(w)
	// Armed under waitMu, so no push can claim and finish w before its timer
	// exists (finish stops the timer; a timer armed after would linger).
	w.wh.Schedule(&w.timer, w.deadline, w)
	q.waitMu.Unlock()
	// The second look: claim w before taking, as a push would.
	for _, p := range q.partitions() {
		p.mu.Lock()
		if w.g.dead.Load() {
			p.mu.Unlock()
			break
		}
		c := p.cursorFor(w.g)
		c.expireDue(now)
		if c.available() > 0 && w.state.CompareAndSwap(waiting, claimed) {
			q.unlinkWildcard(w)
			n = c.take(w.batch, w.autoAck, w.c, now)
			p.mu.Unlock()
			w.wh.Stop(&w.timer)
			w.unpark(now)
			return n, false
		}
		p.mu.Unlock()
	}
	if q.dead.Load() && w.state.CompareAndSwap(waiting, claimed) {
		q.unlinkWildcard(w)
		w.wh.Stop(&w.timer)
		w.unpark(now)
		return 0, false
	}
	return 0, true
}

func (q *Queue) unlinkWildcard(w *waiter) {
	q.waitMu.Lock()
	q.waiters.remove(w)
	q.waitMu.Unlock()
}

// unpark undoes the parked gauges and gives back the parked pop's charge;
// the waiter is done.
func (w *waiter) unpark(now int64) {
	w.q.t.force(-w.q.e.charge.parked)
	w.q.parked.Add(-1)
	w.g.parked.Add(-1)
	w.g.lastActive.Store(now)
	w.q.lastActive.Store(now)
}

// serve offers w the messages available to it in p, which a push (or an
// expired or released lease) just made available; p.mu is held and w is on
// list l. It claims and fills w, or starts its window buffer (D12).
func (p *partition) serve(w *waiter, l *waitList, done *doneList, now int64) {
	if w.state.Load() != waiting || w.g.dead.Load() {
		return
	}
	c := p.cursorFor(w.g)
	c.expireDue(now)
	avail := c.available()
	if avail == 0 {
		return
	}
	opts := p.q.options()
	if opts.WindowMs > 0 {
		target := int64(w.batch)
		if opts.WindowCount > 0 {
			target = min(target, opts.WindowCount)
		}
		if int64(avail) < target {
			if w.windowEnd.Load() == 0 {
				end := min(now+opts.WindowMs*1e6, w.deadline)
				w.windowEnd.Store(end)
				w.wh.Schedule(&w.timer, end, w)
			}
			if now < w.windowEnd.Load() {
				return
			}
		}
	}
	if !w.state.CompareAndSwap(waiting, claimed) {
		return
	}
	l.remove(w)
	n := c.take(w.batch, w.autoAck, w.c, now)
	done.add(w, n)
}

// wakeLocked serves the parked pops of p, then the queue's parked pops
// without a partition, FIFO; p.mu is held.
func (p *partition) wakeLocked(done *doneList) {
	q := p.q
	if q.parked.Load() == 0 {
		return
	}
	now := q.e.nowNanos()
	for w := p.waiters.head; w != nil; {
		next := w.next
		p.serve(w, &p.waiters, done, now)
		w = next
	}
	q.waitMu.Lock()
	for w := q.waiters.head; w != nil; {
		next := w.next
		p.serve(w, &q.waiters, done, now)
		w = next
	}
	q.waitMu.Unlock()
}

// Fire is the parked pop's timer: its window buffer ended or its timeout
// came. It answers with what is available then, possibly nothing; a window
// that ends with nothing left to take (another consumer took it) parks again.
func (w *waiter) Fire(now int64) {
	if w.state.Load() != waiting {
		return
	}
	windowDue := w.windowEnd.Load() != 0 && now >= w.windowEnd.Load()
	if !windowDue && now < w.deadline {
		at := w.deadline // an early or stale fire: arm the right time again
		if end := w.windowEnd.Load(); end != 0 {
			at = end
		}
		w.wh.Schedule(&w.timer, at, w)
		return
	}
	if !w.claimFromList() {
		return
	}
	var n int
	if w.p != nil {
		w.p.mu.Lock()
		n = w.p.takeFor(w, w.batch, now)
		w.p.mu.Unlock()
	} else {
		n, _ = w.q.e.takeNow(w, now)
	}
	if n == 0 && now < w.deadline {
		w.windowEnd.Store(0)
		if m, parked := w.park(now); !parked {
			// park already undid the gauges; only the consumer is left.
			w.wh.Stop(&w.timer)
			w.c.Complete(m, nil)
		}
		return
	}
	w.finish(n, nil)
}

// claimFromList claims w and takes it off its list.
func (w *waiter) claimFromList() bool {
	if w.p != nil {
		w.p.mu.Lock()
		defer w.p.mu.Unlock()
		if !w.state.CompareAndSwap(waiting, claimed) {
			return false
		}
		w.p.waiters.remove(w)
		return true
	}
	if !w.state.CompareAndSwap(waiting, claimed) {
		return false
	}
	w.q.unlinkWildcard(w)
	return true
}

// finish completes a claimed waiter: gauges, timer, then the consumer.
func (w *waiter) finish(n int, by Origin) {
	w.wh.Stop(&w.timer)
	w.unpark(w.q.e.nowNanos())
	w.c.Complete(n, by)
}

// Cancel removes a parked pop whose connection closed (D13). It reports
// whether it did; false means the pop is already being completed.
func (e *Engine) Cancel(p Parked) bool {
	w := p.w
	if w == nil || !w.claimFromList() {
		return false
	}
	w.wh.Stop(&w.timer)
	w.unpark(e.nowNanos())
	return true
}

// claimAll claims every parked pop still waiting on l, to be answered with
// an empty batch once the lock guarding l is released.
func (l *waitList) claimAll(done *doneList) {
	for w := l.head; w != nil; {
		next := w.next
		if w.state.CompareAndSwap(waiting, claimed) {
			l.remove(w)
			done.add(w, 0)
		}
		w = next
	}
}

// doneList collects waiters completed under a lock, to finish after it.
type doneList struct {
	by  Origin // the origin of the PushBy or AckBy call, passed to Complete
	ws  [8]*waiter
	ns  [8]int
	n   int
	ext []struct {
		w *waiter
		n int
	}
}

func (d *doneList) add(w *waiter, n int) {
	if d.n < len(d.ws) {
		d.ws[d.n], d.ns[d.n] = w, n
		d.n++
		return
	}
	d.ext = append(d.ext, struct {
		w *waiter
		n int
	}{w, n})
}

func (d *doneList) finish() {
	for i := 0; i < d.n; i++ {
		d.ws[i].finish(d.ns[i], d.by)
	}
	for _, x := range d.ext {
		x.w.finish(x.n, d.by)
	}
}

// ReleaseWaiters answers every parked pop with what it has: nothing (the
// kill switch pauses the surface, D15; Close ends the broker).
func (e *Engine) ReleaseWaiters() {
	e.tenants.Range(func(_ string, t *tenant) bool {
		t.queues.Range(func(_ string, q *Queue) bool {
			q.releaseWaiters()
			return true
		})
		return true
	})
}

// releaseWaiters completes every parked pop of q with an empty batch.
func (q *Queue) releaseWaiters() {
	if q.parked.Load() == 0 {
		return
	}
	var done doneList
	for _, p := range q.partitions() {
		p.mu.Lock()
		p.waiters.claimAll(&done)
		p.mu.Unlock()
	}
	q.waitMu.Lock()
	q.waiters.claimAll(&done)
	q.waitMu.Unlock()
	done.finish()
}
