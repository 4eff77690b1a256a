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
	fp := s.e.footprint.Load()
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
	return e.footprint.Load() > e.cfg.MaxBytes-e.cfg.MaxBytes/8
}

func (s *sweeper) Fire(now int64) {
	e := s.e
	if e.closed.Load() {
		return
	}
	e.Sweep(now)
	e.wheels.Shard(0).Schedule(&s.timer, now+int64(e.cfg.SweepEvery), s)
}

// Sweep runs one idle collection pass at engine time now. The wheel calls it
// every SweepEvery; tests may call it directly.
func (e *Engine) Sweep(now int64) {
	groupIdle := int64(e.cfg.GroupIdle)
	e.tenants.Range(func(_ string, t *tenant) bool {
		t.queues.Range(func(_ string, q *Queue) bool {
			for _, g := range q.groupList() {
				if g.parked.Load() == 0 && now-g.lastActive.Load() >= groupIdle {
					q.forgetIdle(now)
					break
				}
			}
			if q.collectable(now) {
				q.remove(true)
			}
			return true
		})
		return true
	})
	if e.nearBudget() && e.reclaimable.Load() > 0 {
		e.reclaimAll()
	}
	e.sweep.returnMemory(now)
}

// collectable says whether q is an implicit queue that has been idle for
// ImplicitIdle with nothing pending and no parked pop (D8).
func (q *Queue) collectable(now int64) bool {
	return !q.declared.Load() &&
		q.parked.Load() == 0 &&
		q.length.Load()-q.reclaimN.Load() == 0 &&
		now-q.lastActive.Load() >= int64(q.e.cfg.ImplicitIdle)
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
