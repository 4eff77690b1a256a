package engine

import (
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/engine/wheel"
)

type xsyncOp = xsync.ComputeOp

const (
	opDelete = xsync.DeleteOp
	opCancel = xsync.CancelOp
	opUpdate = xsync.UpdateOp
)

// sweeper runs every SweepEvery from the timing wheel: it forgets idle
// groups (D4), collects idle implicit queues (D8) and frees reclaimable
// messages when the broker nears its total budget (D3).
type sweeper struct {
	e     *Engine
	timer wheel.Timer

	lastTrim   int64 // engine time of the last arena trim
	lastReturn int64 // engine time memory was last given to the OS
	peak       int64 // the highest footprint seen at a trim since then
	unreturned int64 // bytes trimmed since memory was last given to the OS

	index dueIndex // the queues by the tick they may next need a visit
	due   []*Queue // scratch: the queues of the ticks being visited
}

const (
	// trimEvery is how often the arena's idle pooled segments are released:
	// a segment no push needed for a whole period goes, so memory a fallen
	// load no longer uses is released within two periods (docs/engine.md,
	// "Memory goes back when the load falls").
	trimEvery = int64(5 * time.Second)
	// returnEvery is the least time between two calls of FreeOSMemory,
	// which forces a collection: under a churning load it runs no more
	// often than this.
	returnEvery = int64(10 * time.Second)
	// returnAt is how much memory freed is worth asking the runtime to give
	// back to the operating system at once.
	returnAt = 4 << 20
)

// returnMemory trims the arena's free pool every trimEvery and calls
// Config.FreeOSMemory, at most once per returnEvery, once a meaningful
// amount was freed: segments trimmed, or a footprint fallen by at least a
// quarter from its peak (queues, partitions and groups that went are heap
// the runtime keeps for itself until told).
func (s *sweeper) returnMemory(now int64) {
	if now-s.lastTrim < trimEvery {
		return
	}
	s.lastTrim = now
	s.unreturned += s.e.arena.TrimIdle()
	fp := s.e.CellBytes()
	s.peak = max(s.peak, fp)
	fell := s.peak - fp
	if now-s.lastReturn < returnEvery {
		return
	}
	if s.unreturned >= returnAt || fell >= returnAt && fell >= s.peak/4 {
		s.unreturned, s.lastReturn, s.peak = 0, now, fp
		s.e.cfg.FreeOSMemory()
	}
}

// nearBudget is the share of QUEEN_EPHEMERAL_MAX_BYTES above which the
// sweeper frees reclaimable messages ahead of need (7/8).
func (e *Engine) nearBudget() bool {
	return e.CellBytes() > e.cfg.MaxBytes-e.cfg.MaxBytes/8
}

func (s *sweeper) Fire(now int64) {
	e := s.e
	if e.closed.Load() {
		return
	}
	e.Sweep(now)
	e.wheels.Shard(0).Schedule(&s.timer, now+int64(e.cfg.SweepEvery), s)
}

// Sweep runs one idle collection pass at engine time now: it visits the
// queues the due index holds for the ticks that have come (idle groups
// forgotten, D4; idle implicit queues collected, D8), walks the tenants
// under memory pressure for empty inboxes, frees reclaimable messages near
// the broker total (D3), and then has sparse arena segments compacted
// (compact.go: woken, or inline with a manual clock). The wheel calls it
// every SweepEvery; tests may call it directly.
func (e *Engine) Sweep(now int64) {
	brokerPressed := pressed(e.CellBytes(), e.cfg.MaxBytes)
	e.tenants.Range(func(_ string, t *tenant) bool {
		if brokerPressed || pressed(t.footprint.Load(), t.maxBytes.Load()) {
			t.pressedAt = now
			if !t.spare.Swap(true) {
				t.collectSpare(now)
			}
		} else if t.spare.Load() && now-t.pressedAt >= spareHold {
			t.spare.Store(false)
		}
		return true
	})
	s := &e.sweep
	s.due = s.index.takeDue(s.due[:0], now/int64(e.cfg.SweepEvery))
	for i, q := range s.due {
		s.due[i] = nil
		e.visit(q, now)
	}
	if e.nearBudget() && e.reclaimableMsgs.Load() > 0 {
		e.reclaimAll()
	}
	// After the reclaim: what it freed beside messages that stay is slack.
	if e.manual != nil {
		e.compactIfWorth(e.compactAt())
	} else {
		e.kickCompaction()
	}
	s.returnMemory(now)
}

// visit does what q's due time came for and files q again for the next.
func (e *Engine) visit(q *Queue, now int64) {
	if q.dead.Load() {
		return
	}
	q.forgetIdle(now)
	if idle := int64(e.cfg.ImplicitIdle); q.idleFor(now, idle) && q.remove(idle) {
		return
	}
	due := q.nextDue(now)
	if q.t.spare.Load() && !q.declared.Load() {
		// Under pressure: collected once quiet for spareIdle, else looked
		// at again then (next tick at the earliest: a pending message or a
		// parked pop holds it meanwhile).
		spare := e.spareIdle()
		if q.idleFor(now, spare) && q.remove(spare) {
			return
		}
		due = min(due, max(q.lastActive.Load()+spare, now+1))
	}
	e.sweep.index.file(q, e.tickOf(due))
}

// collectSpare runs when the tenant comes under memory pressure (below):
// it collects the tenant's empty implicit queues that have been quiet for
// spareIdle, and files the other implicit queues for a visit when they
// would have been quiet that long. From then on, while the pressure lasts,
// the due index does the rest: a new implicit queue is filed for then
// (publishQueue), and a visit files one again no later (visit). Walking
// every queue on every sweep instead, and retiring them from the walk, was
// a quarter of the broker's CPU under a fresh-inbox-per-request load.
func (t *tenant) collectSpare(now int64) {
	e := t.e
	idle := e.spareIdle()
	t.queues.Range(func(_ string, q *Queue) bool {
		switch {
		case q.declared.Load():
		case q.idleFor(now, idle) && q.remove(idle):
		default:
			e.sweep.index.advance(q, e.tickOf(max(q.lastActive.Load()+idle, now+1)))
		}
		return true
	})
}

// spareIdle is how long an empty implicit queue is kept under pressure:
// spareIdle, or the implicit idle time when that is shorter.
func (e *Engine) spareIdle() int64 { return min(int64(e.cfg.ImplicitIdle), spareIdle) }

// Early collection under memory pressure (docs/engine.md, "Empty inboxes
// under memory pressure"). A request/reply load that mints an inbox per
// request leaves an empty implicit queue behind each (about 1 KiB of
// charges, queue, partition, cursor), which D8 keeps for 300 s: at the
// default budget a sustained 1,000 requests/s would fill it with empty
// inboxes within five minutes, and every push after that would be refused.
// An empty implicit queue holds nothing the contract keeps, so once the
// footprint passes 3/4 of a budget (the broker total, or a tenant's
// allowance for its own queues) the sweep collects those quiet for
// spareIdle: recreated by the next push or pop that names it, an inbox
// loses nothing but its place in the listing.
const spareIdle = int64(time.Second)

// spareHold: a tenant stays in that mode until it has been below the mark
// for this long. Early collection keeps the footprint well below the mark
// under a steady inbox load, so leaving the mode as soon as the footprint
// fell would have the inboxes pile up again for D8's 300 s, the mark
// passed again seconds later, and every such turn start with a walk of
// every queue held (collectSpare).
const spareHold = int64(time.Minute)

// pressed reports whether footprint has passed 3/4 of max (0: no bound).
func pressed(footprint, max int64) bool {
	return max > 0 && footprint > max-max/4
}

// idleFor says whether q is an implicit queue with nothing pending and no
// parked pop that has been idle for idle: ImplicitIdle (D8), or spareIdle
// under memory pressure.
func (q *Queue) idleFor(now, idle int64) bool {
	return !q.declared.Load() &&
		q.parked.Load() == 0 &&
		q.length.Load()-q.reclaimableMsgs.Load() == 0 &&
		now-q.lastActive.Load() >= idle
}

// forgetIdle drops the groups of q that have neither popped nor acked for
// GroupIdle and have no parked pop (D4): their cursors stop pinning
// messages, and a later pop with one of their names starts a new group. They
// go all at once, with one copy of the group list and one pass over each
// partition's cursors, so a queue left with many idle groups (a flood of
// group names) costs the sweep time linear in them rather than quadratic.
func (q *Queue) forgetIdle(now int64) {
	idle := int64(q.e.cfg.GroupIdle)
	q.mu.Lock()
	var gone []*group
	for _, g := range q.groupList() {
		if !g.dead.Load() && g.parked.Load() == 0 && now-g.lastActive.Load() >= idle {
			g.dead.Store(true)
			gone = append(gone, g)
		}
	}
	q.dropGroupsLocked(gone)
	q.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	for _, p := range q.partitions() {
		p.mu.Lock()
		p.removeDeadCursors()
		p.mu.Unlock()
	}
}
