package engine

// Freeing reclaimable messages before a refusal (D3).
//
// Reclaimable messages are freed when their queue, their tenant or the
// broker needs the room. A pass over a tenant visits only the queues in its
// reclaimers set, those that may hold reclaimable messages, and not every
// queue it has: on a broker spent by queues that hold only pending
// messages, a refused push would otherwise walk them all, and each queue a
// client names would make the next refusal slower (TestQueueNameFlood).
//
// Invariant: a live queue whose reclaimableMsgs is above 0 is in its
// tenant's reclaimers set, or a pass that took it out is about to look at
// its count again. A queue joins when its count moves up (noteReclaimable);
// q.reclaimer makes that cheap, since only the joiner that sets it stores
// the entry. A pass takes a queue out of the set before it clears the flag
// and reads the count after: a queue that gained reclaimable messages in
// between either found the flag clear and joined again, or is seen by the
// pass, which puts it back. A pass takes every queue out at once
// (takeAll) and then looks at each. Passes over one tenant run one at a time
// (tenant.reclaimMu), so no pass takes out an entry another just put back.

// noteReclaimable puts q in its tenant's reclaimers set after its
// reclaimable count moved up. A dead queue gave everything back and joins
// nothing.
func (q *Queue) noteReclaimable() {
	// The plain load first: a queue in the set (the common case, under a
	// steady consumer) costs no locked instruction.
	if !q.reclaimer.Load() && !q.dead.Load() && q.reclaimer.CompareAndSwap(false, true) {
		q.t.reclaimers.add(q)
	}
}

// reclaimAll frees every reclaimable message of the queue.
func (q *Queue) reclaimAll() {
	for _, p := range q.partitions() {
		p.mu.Lock()
		p.freeHead(p.reclaim-p.head, causeNone) // the point never lags the head
		p.mu.Unlock()
	}
}

// reclaimAll frees every reclaimable message of the tenant's queues.
func (t *tenant) reclaimAll() {
	t.reclaimMu.Lock()
	defer t.reclaimMu.Unlock()
	took := t.reclaimers.takeAll(t.reclaimScratch[:0])
	for i, q := range took {
		took[i] = nil
		if !q.dead.Load() {
			q.reclaimAll()
		}
		q.reclaimer.Store(false)
		if q.reclaimableMsgs.Load() > 0 {
			q.noteReclaimable()
		}
	}
	if cap(took) <= maxReclaimScratch {
		t.reclaimScratch = took[:0]
	} else {
		t.reclaimScratch = nil
	}
}

// maxReclaimScratch: a pass's list of queues grown past this many is not
// kept for the next pass.
const maxReclaimScratch = 1 << 12

// reclaimAll frees every reclaimable message of the broker (D3: the broker
// never refuses while reclaimable bytes could make the room).
func (e *Engine) reclaimAll() {
	e.reclaimMu.Lock()
	defer e.reclaimMu.Unlock()
	e.tenants.Range(func(_ string, t *tenant) bool {
		if t.reclaimableMsgs.Load() > 0 {
			t.reclaimAll()
		}
		return true
	})
}

// reclaimIn frees the reclaimable messages of one scope: q's, t's or the
// broker's.
func (e *Engine) reclaimIn(scope reclaimScope, q *Queue, t *tenant) {
	switch scope {
	case reclaimQueue:
		q.reclaimAll()
	case reclaimTenant:
		t.reclaimAll()
	case reclaimBroker:
		e.reclaimAll()
	}
}
