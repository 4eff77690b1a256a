package engine

// Ownership moves (D17). In a cell every (tenant, queue) is owned by one
// member; when a membership change moves a queue away, the member that lost
// it drops what it held for it, and an ack of any id minted before the move
// answers stale, on every member, including this one after ownership comes
// back. Deciding who owns what is the cell's (cell/); the engine only drops
// on demand and keeps ids decidable (docs/engine.md, "Ownership moves").

// DropForMove empties a queue whose ownership moved away, as D17 says the
// old owner does: its messages, leases, cursors and groups go, its parked
// pops are answered with an empty batch, and every id it minted answers
// stale from then on. A declared queue stays declared, with its declaration
// and nothing else (a fresh instance replaces it in the same step that
// empties it); an implicit queue goes, as an idle one would. A queue that
// never had a partition, a group or a parked pop (a declared queue this
// member never owned) is left as it is: it holds nothing and minted nothing.
// It returns the messages dropped, counted as Reset counts them.
func (e *Engine) DropForMove(tenant, queue string) (int64, error) {
	if err := CheckName("queue", queue); err != nil {
		return 0, err
	}
	n, _ := e.dropForMove(tenant, queue)
	return n, nil
}

// dropForMove is DropForMove without the name check; it also reports
// whether the queue held anything (and so was dropped).
func (e *Engine) dropForMove(tenant, queue string) (int64, bool) {
	for {
		q := e.lookup(tenant, queue)
		if q == nil {
			return 0, false
		}
		n, killed := q.retire(-1, true)
		if killed {
			return n, true
		}
		if !q.dead.Load() {
			return 0, false // pristine: nothing to drop
		}
		// Killed by someone else meanwhile (delete, another move): look
		// again, a declared queue's replacement may need nothing or the same.
	}
}

// DropMoved walks every queue of every tenant and drops, as DropForMove
// does, each one keep does not keep: the cell calls it after a membership
// change with keep answering "do I still own it?". It returns how many
// queues held something and were dropped, and the messages dropped. keep is
// called with no lock held (as EachQueueName calls f); it may be called
// twice for a queue dropped and created again during the walk. The walk
// allocates nothing of its own.
func (e *Engine) DropMoved(keep func(tenant, queue string) bool) (queues int, messages int64) {
	e.EachQueueName(func(tenant, queue string) bool {
		if !keep(tenant, queue) {
			if n, dropped := e.dropForMove(tenant, queue); dropped {
				queues++
				messages += n
			}
		}
		return true
	})
	return queues, messages
}

// EachQueueName calls f with the tenant and name of every live queue, in no
// particular order, until f returns false. No lock is held while f runs, so
// f may call any engine method (DropForMove included). A queue created or
// removed during the walk may or may not be seen, and one removed and
// created again may be seen twice (the walk reads the maps without locking
// them: it allocates nothing, whatever the number of tenants and queues).
// The strings are the engine's own, immutable, valid after the call.
func (e *Engine) EachQueueName(f func(tenant, queue string) bool) {
	more := true
	e.tenants.RangeRelaxed(func(_ string, t *tenant) bool {
		t.queues.RangeRelaxed(func(_ string, q *Queue) bool {
			if !q.dead.Load() {
				more = f(t.name, q.name)
			}
			return more
		})
		return more
	})
}

// successor is the fresh, empty instance that replaces a declared queue an
// ownership move empties: the same declaration, nothing else. Its base is
// the move floor just raised, so no id of q passes for one of its own. q's
// charges were given back; the successor's is taken here (forced: it
// replaces an admitted queue, it is not one more).
func (q *Queue) successor() *Queue {
	next := newQueue(q.e, q.t, q.name)
	next.declared.Store(true)
	next.opts.Store(q.opts.Load())
	q.t.force(q.e.charge.ofQueue(q.name))
	return next
}

// raiseMoveFloor raises the move floor to v. The seq floor was raised to v
// before, so the move floor never passes it: a queue made after this starts
// its partitions at or above its own base.
func (e *Engine) raiseMoveFloor(v uint64) {
	for {
		cur := e.moveFloor.Load()
		if v <= cur || e.moveFloor.CompareAndSwap(cur, v) {
			return
		}
	}
}

// mintedBeforeMove reports whether an id of this incarnation with seq, acked
// on q (nil: no such queue here), was minted before an ownership move of
// that queue, and so is stale. Seqs are never reused and only grow within
// an incarnation (D6), so the seq alone decides: a queue's instance issues
// seqs at or above its base; a queue that is not here issued every seq of
// its last instance below the move floor, if a move removed it.
func (e *Engine) mintedBeforeMove(q *Queue, seq uint64) bool {
	if q == nil {
		return seq < e.moveFloor.Load()
	}
	return seq < q.base
}

// goneOutcome answers an ack whose queue died while the ack looked at it.
func (e *Engine) goneOutcome(seq uint64) Outcome {
	if e.mintedBeforeMove(nil, seq) {
		return OutcomeStale
	}
	return OutcomeUnknown
}
