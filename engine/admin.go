package engine

// Configure declares a queue with the options as sent (D9): the declaration
// replaces the previous one whole, options left out take the defaults, and
// the options in force are clamped to the ceilings. Configuring an implicit
// queue makes it declared and keeps its contents. (The server writes the
// store first and calls Configure second.)
func (e *Engine) Configure(tenant, queue string, sent OptionSet) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if err := CheckName("queue", queue); err != nil {
		return err
	}
	if err := sent.Validate(); err != nil {
		return err
	}
	opts := e.Resolve(sent)
	for {
		q, err := e.queueFor(tenant, queue)
		if err != nil {
			return err
		}
		q.mu.Lock()
		if q.dead.Load() {
			q.mu.Unlock()
			continue
		}
		q.declared.Store(true)
		q.opts.Store(&opts)
		q.mu.Unlock()
		var done doneList
		for _, p := range q.partitions() {
			p.mu.Lock()
			p.armTTL()
			p.mu.Unlock()
		}
		done.finish()
		return nil
	}
}

// CheckDeclare reports whether configure may declare the queue now: it
// exists already, or the tenant's queue allowance, then its byte allowance
// and the broker's total have room for its charge. The server asks before it
// writes the declaration, so a refused configure stores nothing (D14).
// Configure checks again, atomically.
func (e *Engine) CheckDeclare(tenant, queue string) error {
	if err := CheckName("queue", queue); err != nil {
		return err
	}
	if e.lookup(tenant, queue) != nil {
		return nil
	}
	t := e.tenant(tenant)
	if t.atQueueAllowance() {
		return ErrTenantQueues
	}
	return t.wouldFit(e.charge.ofQueue(queue))
}

// Reset drops every message of a queue, voids every lease and moves every
// group cursor to the (now empty) ring's start; the declaration and the
// groups stay. It returns the number of messages dropped (0 when the queue
// is not there). Reset drops are not counted as bounds, ttl or retry drops.
func (e *Engine) Reset(tenant, queue string) (int64, error) {
	if err := CheckName("queue", queue); err != nil {
		return 0, err
	}
	q := e.lookup(tenant, queue)
	if q == nil {
		return 0, nil
	}
	var dropped int64
	for _, p := range q.partitions() {
		p.mu.Lock()
		dropped += int64(p.held())
		p.ensureCursors() // then every cursor moves to the end: no skips
		for _, c := range p.cursors {
			if c.leased {
				c.releaseLease()
			}
			c.settled, c.next = p.tail, p.tail
			c.win.reset()
			c.inflight, c.redeliver = 0, 0
		}
		p.freeHead(p.held(), causeNone)
		p.updateReclaim()
		p.armTTL()
		p.mu.Unlock()
	}
	return dropped, nil
}

// Delete removes a queue: contents, cursors and declaration. Parked pops on
// it are answered with an empty batch. It reports whether there was a queue.
func (e *Engine) Delete(tenant, queue string) (bool, error) {
	if err := CheckName("queue", queue); err != nil {
		return false, err
	}
	q := e.lookup(tenant, queue)
	if q == nil {
		return false, nil
	}
	return q.remove(-1), nil
}

// DropContents empties a queue as an ownership move does (D17): like Reset,
// for the cell's use.
func (e *Engine) DropContents(tenant, queue string) int64 {
	n, _ := e.Reset(tenant, queue)
	return n
}

// remove kills q: with idle >= 0 it first checks, under every lock, that
// the queue is an implicit one still collectable after that idle time
// (Queue.idleFor); idle < 0 removes it whatever it holds (delete).
func (q *Queue) remove(idle int64) bool {
	e := q.e
	q.mu.Lock()
	if q.dead.Load() {
		q.mu.Unlock()
		return false
	}
	parts := q.partitions()
	for _, p := range parts {
		p.mu.Lock()
	}
	unlockAll := func() {
		for _, p := range parts {
			p.mu.Unlock()
		}
	}
	if idle >= 0 && !q.idleFor(e.nowNanos(), idle) {
		unlockAll()
		q.mu.Unlock()
		return false
	}
	var done doneList
	for _, p := range parts {
		p.freeHead(p.held(), causeNone)
		p.armTTL() // stops it: nothing is held
		for _, c := range p.cursors {
			c.dropLease()
		}
		p.waiters.claimAll(&done)
		e.raiseSeqFloor(p.tail)
		p.release()
	}
	for _, g := range q.groupList() {
		g.dead.Store(true) // so a forget in flight gives nothing back twice
		q.t.force(-q.e.charge.ofGroup(g.name))
	}
	q.t.force(-q.e.charge.ofQueue(q.name))
	// Every charge is given back: from here on nothing of q charges again.
	q.dead.Store(true)
	unlockAll()
	q.mu.Unlock()
	q.waitMu.Lock()
	q.waiters.claimAll(&done)
	q.waitMu.Unlock()
	q.t.queues.Compute(q.name, func(old *Queue, loaded bool) (*Queue, xsyncOp) {
		if loaded && old == q {
			return nil, opDelete
		}
		return old, opCancel
	})
	q.t.nqueues.Add(-1)
	e.sweep.index.drop(q)
	done.finish()
	return true
}

// raiseSeqFloor makes every partition created from now on start at or above
// v, so a queue created again never reuses an id (D6).
func (e *Engine) raiseSeqFloor(v uint64) {
	for {
		cur := e.seqFloor.Load()
		if v <= cur || e.seqFloor.CompareAndSwap(cur, v) {
			return
		}
	}
}
