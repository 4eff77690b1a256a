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
		q, err := e.queueFor(tenant, queue, true)
		if err != nil {
			return err
		}
		q.mu.Lock()
		if q.dead.Load() {
			q.mu.Unlock()
			continue
		}
		if !q.declared.Load() {
			// An implicit queue declared: it moves to the declared count,
			// which a cell's division bounds on its own (tenant.promoteQueue).
			if !q.t.promoteQueue() {
				q.mu.Unlock()
				return ErrTenantQueues
			}
			q.declared.Store(true)
		}
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

// CheckDeclare reports whether configure may declare the queue now: it is
// declared already; or it exists (implicit) and the declared queues are
// under the allowance (always, undivided: it is counted already); or the
// tenant's queue allowance for a declared queue, then its byte allowance
// and the broker's total have room for its charge. The server asks before it
// writes the declaration, so a refused configure stores nothing (D14).
// Configure checks again, atomically.
func (e *Engine) CheckDeclare(tenant, queue string) error {
	if err := CheckName("queue", queue); err != nil {
		return err
	}
	t := e.tenant(tenant)
	if q := e.lookup(tenant, queue); q != nil {
		if !q.declared.Load() && t.queueShare.Load() > 1 && t.atQueueAllowance(true) {
			return ErrTenantQueues
		}
		return nil
	}
	if t.atQueueAllowance(true) {
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
	for {
		q := e.lookup(tenant, queue)
		if q == nil {
			return false, nil
		}
		if q.remove(-1) {
			return true, nil
		}
		// q died under us: deleted, or replaced by an ownership move
		// (DropForMove), whose replacement is what is deleted now.
	}
}

// remove kills q: with idle >= 0 it first checks, under every lock, that
// the queue is an implicit one still collectable after that idle time
// (Queue.idleFor); idle < 0 removes it whatever it holds (delete).
func (q *Queue) remove(idle int64) bool {
	_, ok := q.retire(idle, false)
	return ok
}

// retire kills q as remove does and reports what it held. With move set it
// is an ownership move (D17, docs/engine.md "Ownership moves"): the move
// floor is raised above every seq q issued, so that each of its ids answers
// stale from here on, and a declared queue is replaced in the tenant's map,
// in the same step that kills it, by a fresh empty instance with the same
// declaration; an implicit one goes. A move leaves a pristine queue (no
// partition, group or parked pop) alone. It returns the messages dropped
// (held, as Reset counts them) and whether it killed q.
func (q *Queue) retire(idle int64, move bool) (dropped int64, ok bool) {
	e := q.e
	q.mu.Lock()
	if q.dead.Load() {
		q.mu.Unlock()
		return 0, false
	}
	parts := q.partitions()
	if move && len(parts) == 0 && len(q.groupList()) == 0 && q.parked.Load() == 0 {
		// Pristine: no partition, so no id was ever minted; no group, so no
		// parked pop. Partitions and groups are made under q.mu.
		q.mu.Unlock()
		return 0, false
	}
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
		return 0, false
	}
	// The groups die first: freeing the partitions then makes no cursor for
	// a group that never read there only to count skips nobody will read.
	for _, g := range q.groupList() {
		g.dead.Store(true) // so a forget in flight gives nothing back twice
		q.t.force(-q.e.charge.ofGroup(g.name))
	}
	var done doneList
	var top uint64 // the highest tail: every seq q issued is below it
	for _, p := range parts {
		dropped += int64(p.held()) // counted as reset counts
		p.freeHead(p.held(), causeNone)
		p.armTTL() // stops it: nothing is held
		for _, c := range p.cursors {
			c.dropLease()
		}
		p.waiters.claimAll(&done)
		e.raiseSeqFloor(p.tail)
		top = max(top, p.tail)
		p.release()
	}
	q.t.force(-q.e.charge.ofQueue(q.name))
	// Every charge is given back: from here on nothing of q charges again.
	// declared cannot change any more: Configure and Undeclare change it
	// under q.mu, held here until q is dead.
	declared := q.declared.Load()
	var next *Queue
	if move {
		e.raiseMoveFloor(top) // before anyone can see q dead or gone
		if declared {
			next = q.successor()
		}
	}
	if next != nil {
		// Published before q is marked dead and while q's locks are held:
		// whoever finds q dead and looks again finds next, and no push can
		// slip an implicit queue in between (publishQueue replaces only a
		// dead queue).
		installed := false
		q.t.queues.Compute(q.name, func(old *Queue, loaded bool) (*Queue, xsyncOp) {
			if loaded && old == q {
				installed = true
				return next, opUpdate
			}
			return old, opCancel
		})
		if !installed { // cannot happen while q is live and its locks held
			q.t.force(-e.charge.ofQueue(next.name))
			next = nil
		}
	}
	q.dead.Store(true)
	q.t.reclaimers.remove(q) // it holds nothing now, and joins nothing again
	unlockAll()
	q.mu.Unlock()
	q.waitMu.Lock()
	q.waiters.claimAll(&done)
	q.waitMu.Unlock()
	if next == nil {
		q.t.queues.Compute(q.name, func(old *Queue, loaded bool) (*Queue, xsyncOp) {
			if loaded && old == q {
				return nil, opDelete
			}
			return old, opCancel
		})
		q.t.forgetQueue(declared)
	}
	e.sweep.index.drop(q)
	if next != nil {
		// Installed without publishQueue, which files the queues it
		// publishes: the successor is filed here.
		e.sweep.index.file(next, e.tickOf(next.nextDue(e.nowNanos())))
	}
	done.finish()
	return dropped, true
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
