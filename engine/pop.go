package engine

import "time"

// Message is one delivered message. Payload aliases arena memory and is
// valid only during the Deliver call: copy it (once, into the response; P2).
type Message struct {
	Partition string
	Seq       uint64
	Attempts  int
	Payload   []byte
}

// Consumer receives a pop's messages. Deliver is called with a partition lock
// held and must only copy what it needs. Complete is called, with no lock
// held, once for a pop that parked: with the number of messages delivered
// (0 on timeout, pause, delete or shutdown). It is never called for a pop
// answered at once, nor for one that Cancel removed.
//
// by is the Origin of the PushBy or AckBy call that completed the pop (nil
// when the timing wheel, a delete or a release completed it).
type Consumer interface {
	Deliver(m Message)
	Complete(n int, by Origin)
}

// Origin says who made a push or an ack, for the parked pops it completes:
// the engine carries it, unread, from PushBy or AckBy to Consumer.Complete.
// The server passes the connection it is serving, so that an answer for a
// connection of the same event loop is written without a cross-loop hop.
//
// Pass a pointer, or nil: a pointer stored in an interface does not
// allocate, so the push and ack paths stay free of allocations (the P3
// pins). nil means no origin: Push and Ack pass it, and so does the engine
// for the pops it completes itself.
type Origin interface{}

// PopRequest is one pop (spec: pop query parameters, D11).
type PopRequest struct {
	Tenant    string
	Queue     string
	Partition string // "" = every partition
	Group     string // "" = queue mode
	Batch     int    // clamped to [1, 10000]
	AutoAck   bool
	Wait      bool
	Timeout   time.Duration // how long a waiting pop parks; 0 answers at once
}

// Parked names a parked pop, so its connection can cancel it.
type Parked struct{ w *waiter }

// IsZero reports whether the pop was answered at once rather than parked.
func (p Parked) IsZero() bool { return p.w == nil }

// Pop takes up to Batch messages for the group and delivers them to c. When
// none is available and Wait is set with a positive Timeout, the pop parks
// on the queue's memory gate (no goroutine, P5) and Pop returns its Parked
// handle; c.Complete reports the outcome later.
func (e *Engine) Pop(r *PopRequest, c Consumer) (int, Parked, error) {
	if e.closed.Load() {
		return 0, Parked{}, ErrClosed
	}
	if err := CheckName("queue", r.Queue); err != nil {
		return 0, Parked{}, err
	}
	if err := checkOptionalName("partition", r.Partition); err != nil {
		return 0, Parked{}, err
	}
	if err := checkOptionalName("group", r.Group); err != nil {
		return 0, Parked{}, err
	}
	batch := min(max(r.Batch, 1), MaxBatch)
	for {
		q, err := e.queueFor(r.Tenant, r.Queue, false)
		if err != nil {
			return 0, Parked{}, err
		}
		now := e.nowNanos()
		q.lastActive.Store(now)
		g, err := q.groupFor(queueModeName(r.Group))
		if err != nil {
			return 0, Parked{}, err
		}
		if g == nil {
			continue // the queue was collected under us
		}
		g.lastActive.Store(now)
		w := waiter{q: q, g: g, c: c, batch: batch, autoAck: r.AutoAck}
		if r.Partition != "" {
			if w.p, err = q.partitionFor(r.Partition); err != nil {
				return 0, Parked{}, err
			}
			if w.p == nil {
				continue
			}
		}
		n, ok := e.takeNow(&w, now)
		if !ok || (n == 0 && g.dead.Load()) {
			continue // the queue was collected, or the group forgotten, under us
		}
		if n > 0 || !r.Wait || r.Timeout <= 0 {
			return n, Parked{}, nil
		}
		// A parked pop is charged like any object: refused when it would
		// pass the tenant's allowance or the broker's total; unpark gives
		// the charge back (docs/engine.md, "What the budgets count").
		if err := q.t.reserve(q.e.charge.parked); err != nil {
			return 0, Parked{}, err
		}
		pw := new(waiter)
		*pw = waiter{q: q, p: w.p, g: g, c: c, batch: batch, autoAck: r.AutoAck}
		pw.deadline = now + int64(r.Timeout)
		n, parked := pw.park(now)
		if !parked {
			return n, Parked{}, nil
		}
		return 0, Parked{pw}, nil
	}
}

// takeNow takes what is available for w at once, from its partition or, for
// a pop without partition, from every partition in a fair rotation, taking a
// lease on each partition it takes from (D1). ok is false when the queue
// died meanwhile.
func (e *Engine) takeNow(w *waiter, now int64) (n int, ok bool) {
	if w.p != nil {
		p := w.p
		p.mu.Lock()
		if p.q.dead.Load() {
			p.mu.Unlock()
			return 0, false
		}
		n = p.takeFor(w, w.batch, now)
		p.mu.Unlock()
		return n, true
	}
	parts := w.q.partitions()
	if len(parts) == 0 {
		return 0, !w.q.dead.Load()
	}
	start := int(w.q.rr.Add(1) % uint32(len(parts)))
	for i := 0; i < len(parts) && n < w.batch; i++ {
		p := parts[(start+i)%len(parts)]
		p.mu.Lock()
		if p.q.dead.Load() {
			p.mu.Unlock()
			return n, n > 0
		}
		n += p.takeFor(w, w.batch-n, now)
		p.mu.Unlock()
	}
	return n, true
}

// takeFor takes up to limit messages here for w's group; p.mu is held.
func (p *partition) takeFor(w *waiter, limit int, now int64) int {
	if w.g.dead.Load() {
		return 0 // forgotten: creating a cursor now would pin messages forever
	}
	c := p.cursorFor(w.g)
	c.expireDue(now)
	if c.available() == 0 {
		return 0
	}
	return c.take(limit, w.autoAck, w.c, now)
}
