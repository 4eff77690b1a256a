package engine

import "sync"

// dueIndex files every live queue under the sweep tick at which it may next
// need the sweeper: its collection as an idle implicit queue (D8), or the
// forgetting of one of its groups (D4). The sweeper visits only the queues
// filed under the ticks that have come, so its work is proportional to the
// queues that come due, not to every queue held: a request/reply load that
// mints an inbox per request holds hundreds of thousands of them, and
// walking them all every second was 8 % of the broker's CPU under it.
//
// A queue is filed once, and filed again (later) when a visit finds it
// was active meanwhile: activity only moves its due time later, so filing
// it by a due time computed earlier is never late. A queue is filed no
// later than the shorter idle time from when it was filed, so a group
// created after that is still seen in time. The index holds queues that
// died until they are dropped (Queue.remove drops them at once), so it
// never keeps a collected queue's memory alive.
//
// Invariant (under mu): a queue is filed iff q.dueTick != 0, and then
// ticks[q.dueTick][q.dueSlot] == q.
type dueIndex struct {
	mu    sync.Mutex
	ticks map[int64][]*Queue
	done  int64 // the last tick visited
}

// tickOf is the sweep tick at or after engine time t.
func (e *Engine) tickOf(t int64) int64 {
	every := int64(e.cfg.SweepEvery)
	return (t + every - 1) / every
}

// file puts q under tick (at least the next tick to be visited).
func (x *dueIndex) file(q *Queue, tick int64) {
	x.mu.Lock()
	x.fileLocked(q, tick)
	x.mu.Unlock()
}

func (x *dueIndex) fileLocked(q *Queue, tick int64) {
	if q.dueTick != 0 || q.dead.Load() {
		return // filed already, or removed (after its drop: never filed again)
	}
	tick = max(tick, x.done+1)
	if x.ticks == nil {
		x.ticks = make(map[int64][]*Queue)
	}
	list := x.ticks[tick]
	q.dueTick, q.dueSlot = tick, int32(len(list))
	x.ticks[tick] = append(list, q)
}

// drop takes q out of the index.
func (x *dueIndex) drop(q *Queue) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.dropLocked(q)
}

// advance files q under tick instead of a later one: a queue filed for
// later is moved, one filed no later stays, one not filed (being visited,
// or dead) is left alone.
func (x *dueIndex) advance(q *Queue, tick int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if q.dueTick > max(tick, x.done+1) {
		x.dropLocked(q)
		x.fileLocked(q, tick)
	}
}

func (x *dueIndex) dropLocked(q *Queue) {
	if q.dueTick == 0 {
		return
	}
	list := x.ticks[q.dueTick]
	last := len(list) - 1
	moved := list[last]
	list[q.dueSlot] = moved
	moved.dueSlot = q.dueSlot
	list[last] = nil
	if last == 0 {
		delete(x.ticks, q.dueTick)
	} else {
		x.ticks[q.dueTick] = list[:last]
	}
	q.dueTick, q.dueSlot = 0, 0
}

// takeDue unfiles and returns the queues filed under the ticks up to and
// including tick, appended to dst. It looks at every filed tick: they are
// few whatever the number of queues, since nextDue is never more than the
// shorter idle time away (300 ticks with the defaults).
func (x *dueIndex) takeDue(dst []*Queue, tick int64) []*Queue {
	x.mu.Lock()
	defer x.mu.Unlock()
	for t, list := range x.ticks {
		if t > tick {
			continue
		}
		for _, q := range list {
			q.dueTick, q.dueSlot = 0, 0
			dst = append(dst, q)
		}
		delete(x.ticks, t)
	}
	x.done = max(x.done, tick)
	return dst
}

// filed counts the queues in the index (for tests).
func (x *dueIndex) filed() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, list := range x.ticks {
		n += len(list)
	}
	return n
}

// nextDue is the engine time at which q may next need the sweeper: when it
// would be collectable as an idle implicit queue, or when its least
// recently active group would be forgotten; at the latest the shorter idle
// time from now, so that a group created meanwhile is seen in time. A time
// already past is one that a parked pop or a pending message held off
// (the visit that called nextDue did not act): such a queue is looked at
// again only a whole idle time later, since a parked pop's end and a
// message's consumption are activity, which sets a later due time anyway.
func (q *Queue) nextDue(now int64) int64 {
	implicitIdle, groupIdle := int64(q.e.cfg.ImplicitIdle), int64(q.e.cfg.GroupIdle)
	due := now + min(implicitIdle, groupIdle)
	if t := q.lastActive.Load() + implicitIdle; !q.declared.Load() && t > now {
		due = min(due, t)
	}
	for _, g := range q.groupList() {
		if t := g.lastActive.Load() + groupIdle; t > now {
			due = min(due, t)
		}
	}
	return due
}
