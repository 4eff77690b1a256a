package engine

// The queue allowance (docs/engine.md, "The queue allowance"). Undivided
// (queueShare <= 1: a cell of one, or a tenant on the broker's defaults),
// declared and implicit queues share one count bounded by maxQueues, as
// they always have. Divided among members (queueShare = k > 1), the
// declared queues, which every member holds, are bounded by the whole
// maxQueues, and this member's implicit queues by implicitShare: a k-th of
// what the declared ones leave. Declared queues never wait for implicit
// ones there, so that a configure is not refused, and a member's reconcile
// does not fail to apply a declaration, for what one member happens to
// hold. Counts change only when a queue is created, declared, undeclared
// or removed, never on a push or pop of a queue that is there.

// implicitShare is how many implicit queues one of members members may hold
// when maxQueues (> 0) allows declared of them to be declared: the rest
// divided by members, rounded down as the byte share is, but at least 1
// while there is a rest (a grant of 2 queues in a cell of 3 is not a grant
// of none); 0 when the declared queues take it all.
func implicitShare(maxQueues, declared, members int64) int64 {
	rest := maxQueues - declared
	if rest <= 0 {
		return 0
	}
	return max(1, rest/max(1, members))
}

// atQueueAllowance reports whether one more queue, declared or implicit,
// would pass the tenant's queue allowance now (admitQueue decides for
// good).
func (t *tenant) atQueueAllowance(declared bool) bool {
	m := t.maxQueues.Load()
	if m <= 0 {
		return false
	}
	k := t.queueShare.Load()
	switch {
	case k <= 1:
		return t.nqueues.Load() >= m
	case declared:
		return t.ndeclared.Load() >= m
	default:
		d := t.ndeclared.Load()
		return t.nqueues.Load()-d >= implicitShare(m, d, k)
	}
}

// admitQueue counts one more queue of the kind unless that passes the
// allowance. Each path adds first and checks second, so that concurrent
// creations cannot all pass on the same last slot.
func (t *tenant) admitQueue(declared bool) bool {
	m, k := t.maxQueues.Load(), t.queueShare.Load()
	switch {
	case k <= 1:
		if n := t.nqueues.Add(1); m > 0 && n > m {
			t.nqueues.Add(-1)
			return false
		}
		if declared {
			t.ndeclared.Add(1)
		}
	case declared:
		if d := t.ndeclared.Add(1); m > 0 && d > m {
			t.ndeclared.Add(-1)
			return false
		}
		t.nqueues.Add(1)
	default:
		n := t.nqueues.Add(1)
		if d := t.ndeclared.Load(); m > 0 && n-d > implicitShare(m, d, k) {
			t.nqueues.Add(-1)
			return false
		}
	}
	return true
}

// promoteQueue counts an implicit queue that configure declares as declared
// from now on, unless, divided among members, the declared queues are at
// the allowance. Undivided, the queue is counted already (one count): it is
// always admitted, as it always was. The caller holds the queue's mu.
func (t *tenant) promoteQueue() bool {
	d := t.ndeclared.Add(1)
	if m := t.maxQueues.Load(); m > 0 && d > m && t.queueShare.Load() > 1 {
		t.ndeclared.Add(-1)
		return false
	}
	return true
}

// forgetQueue uncounts a removed queue, declared or not as it died.
func (t *tenant) forgetQueue(declared bool) {
	if declared {
		t.ndeclared.Add(-1)
	}
	t.nqueues.Add(-1)
}
