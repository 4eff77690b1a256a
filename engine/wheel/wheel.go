// Package wheel is a hashed timing wheel with intrusive timers (P5; docs/engine.md, "Time").
//
// Leases, TTLs, poll timeouts and idle checks each embed a Timer by value, so
// arming one costs no allocation and no goroutine. The wheel has no clock of
// its own: the caller drives it with Advance(now), and all times are int64
// nanoseconds on the caller's clock. Tests therefore never sleep.
//
// A timer whose deadline is when lives in slot tick(when) & mask, where
// tick(x) = (x - start) / tick. A slot holds timers of every rotation; the
// absolute deadline stored in each timer plays the part of the classic
// "rounds" count: Advance fires a timer only when its when <= now, so a timer
// many rotations away is passed over until its own rotation comes round.
//
// Concurrency: one mutex per Wheel guards the slots and the link fields of
// every timer scheduled on it; critical sections are a few pointer writes.
// Firers run with that mutex released, so a Fire may Schedule or Stop timers
// on the same wheel (including its own). Use Sharded to spread the lock.
//
// Late fires: Stop and Schedule always win over a pending fire, except for the
// one timer whose Fire an Advance has already taken off the due list (it is
// then unscheduled, and Stop reports false). If another goroutine re-arms or
// stops that timer in that window, the old Fire still runs once. A Firer must
// therefore check its own state (for example: is my deadline <= now, am I
// still parked) before acting.
package wheel

import (
	"sync"
	"sync/atomic"
	"time"
)

// Firer is what a timer calls when it fires.
type Firer interface{ Fire(now int64) }

// Timer is embedded by value in the object it times (a parked pop, a lease, a
// partition's ttl, a queue's idle check). The zero value is an unscheduled
// timer. Times are int64 nanoseconds on the caller's clock.
//
// A Timer must not be copied once used (go vet reports copies). While it is
// scheduled, call Schedule and Stop for it only on the wheel it is scheduled
// on; the simplest rule is to bind each timer to one wheel for life (with
// Sharded, derive the hint from a stable id of the owning object).
type Timer struct {
	when  atomic.Int64 // deadline while scheduled, 0 otherwise; written under the wheel lock
	next  *Timer       // next timer in the same list
	pprev **Timer      // the pointer that points at this timer; nil iff unscheduled
	f     Firer
	w     *Wheel // wheel the timer was last scheduled on (misuse check)
}

// When returns the time the timer is scheduled for, or 0 if it is not
// scheduled. It reads atomically and takes no lock, so it may be called
// concurrently with anything; the answer may be stale by the time it is used.
// A timer scheduled for time 0 is indistinguishable from an unscheduled one,
// so keep caller clocks positive.
func (t *Timer) When() int64 { return t.when.Load() }

// Wheel is a hashed timing wheel. Create it with New.
type Wheel struct {
	adv sync.Mutex // serialises Advance; taken before mu, never inside a Fire

	mu    sync.Mutex // guards everything below and the links of its timers
	tick  int64
	start int64
	mask  uint64
	now   int64    // largest now seen by Advance (start before the first)
	cur   uint64   // tick(now): every timer with when <= now has been collected
	slots []*Timer // heads of the slot lists, each unordered
	due   *Timer   // collected by the running Advance, in slot order, not yet fired
	tail  **Timer  // &last.next of the due list, or &due when it is empty
	n     int      // timers in slots or on the due list

	// wakeAt, while the driver sleeps (SleepUntil): a Schedule for a
	// deadline before it calls wake once. 0 when the driver is awake.
	wakeAt int64
	wake   func()
}

// New returns a wheel with the given tick (resolution, e.g. 10ms) and number
// of slots (power of two, e.g. 4096), whose current time is start.
func New(tick time.Duration, slots int, start int64) *Wheel {
	if tick <= 0 || slots <= 0 || slots&(slots-1) != 0 {
		panic("wheel: tick must be positive and slots a power of two")
	}
	w := &Wheel{tick: int64(tick), start: start, now: start, mask: uint64(slots - 1), slots: make([]*Timer, slots)}
	w.tail = &w.due
	return w
}

// tickOf numbers the tick holding time x; x must be >= w.start.
func (w *Wheel) tickOf(x int64) uint64 { return (uint64(x) - uint64(w.start)) / uint64(w.tick) }

// Schedule arms t to call f.Fire(now) at the first Advance whose now >= when.
// If t is already scheduled it is moved (rescheduled), and a fire still pending
// from the running Advance is cancelled. A when at or before the wheel's
// current time fires at the next Advance (never at the running one, so a Firer
// that re-arms itself in the past cannot loop). Safe for concurrent use. O(1).
func (w *Wheel) Schedule(t *Timer, when int64, f Firer) {
	if f == nil {
		panic("wheel: nil Firer")
	}
	w.mu.Lock()
	if t.pprev != nil {
		w.own(t)
		w.unlink(t)
	} else {
		w.n++
	}
	t.f, t.w = f, w
	t.when.Store(when)
	// Past deadlines go to the current tick's slot (w.cur is tickOf(w.now)),
	// which the next Advance visits first.
	head := &w.slots[w.tickOf(max(when, w.now))&w.mask]
	t.next, t.pprev = *head, head
	if t.next != nil {
		t.next.pprev = &t.next
	}
	*head = t
	var wake func()
	if when < w.wakeAt {
		// The driver sleeps past this deadline (SleepUntil): wake it, once.
		wake, w.wakeAt = w.wake, 0
	}
	w.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// Stop disarms t; it reports whether t was scheduled. A timer already taken by
// a running Advance for firing may still fire once after Stop returns false;
// Firers must tolerate a late fire by checking their own state. O(1).
func (w *Wheel) Stop(t *Timer) bool {
	w.mu.Lock()
	if t.pprev == nil {
		w.mu.Unlock()
		return false
	}
	w.own(t)
	w.unlink(t)
	w.disarm(t)
	w.mu.Unlock()
	return true
}

// Advance moves the wheel to now, firing every timer whose when <= now in
// order of slot (not strictly by time: within a slot, and across a jump of
// more than one rotation, order is arbitrary). Firers are called with no wheel
// lock held, so a Fire may call Schedule/Stop on this wheel, but not Advance
// (it would deadlock). Only one Advance runs at a time (it serialises itself).
// A now earlier than a previous one is treated as that previous one.
//
// The walk visits the slots from the current tick to tick(now), capped at one
// rotation, so a jump of an hour costs one pass over the slots, not millions
// of empty ticks.
func (w *Wheel) Advance(now int64) {
	w.adv.Lock()
	defer w.adv.Unlock()

	w.mu.Lock()
	w.wakeAt = 0 // the driver is awake
	now = max(now, w.now)
	to := w.tickOf(now)
	// The current tick is visited again: it may hold timers later than the
	// previous now but in the same tick, and past-time timers scheduled since.
	span := min(to-w.cur+1, uint64(len(w.slots)))
	for i := range span {
		for t := w.slots[(w.cur+i)&w.mask]; t != nil; {
			next := t.next
			if t.when.Load() <= now {
				w.unlink(t)
				t.pprev = w.tail
				*w.tail = t
				w.tail = &t.next
			}
			t = next
		}
	}
	w.now, w.cur = now, to

	// Fire one at a time, taking each off the due list under the lock, so
	// that a Stop or Schedule made meanwhile (by a Fire or anyone else) still
	// cancels a collected timer that has not fired yet.
	for w.due != nil {
		t := w.due
		f := t.f
		w.unlink(t)
		w.disarm(t)
		w.mu.Unlock()
		f.Fire(now)
		w.mu.Lock()
	}
	w.mu.Unlock()
}

// SleepUntil is for a driver that stops calling Advance while nothing is
// due. It returns the earliest deadline of a timer due before limit, or
// limit when there is none (a deadline already past is returned as it is),
// and until the next Advance, a Schedule for a deadline before the time it
// returned calls wake, once, without the wheel's lock held (so wake must not
// block). The driver may then sleep until that time or until woken.
//
// It walks the slots from the current tick towards tick(limit), at most
// one rotation, and stops at the first slot that holds a timer due by the
// end of its tick; limit should be near (the engine's sweep period): a
// timer due more than a rotation ahead is not seen.
func (w *Wheel) SleepUntil(limit int64, wake func()) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := limit
	if w.due != nil {
		next = w.now // an Advance is firing: nothing may sleep
	}
	span := min(w.tickOf(max(limit, w.now))-w.cur+1, uint64(len(w.slots)))
	for i := range span {
		tick := w.cur + i
		for t := w.slots[tick&w.mask]; t != nil; t = t.next {
			next = min(next, t.when.Load())
		}
		if next < w.start+int64(tick+1)*w.tick {
			// Due by the end of this tick: the later slots of this
			// rotation hold nothing earlier, so a wheel with a timer due
			// soon is answered after a slot or two.
			break
		}
	}
	w.wakeAt, w.wake = next, wake
	return next
}

// Len is the number of scheduled timers (including those collected by a
// running Advance and not yet fired).
func (w *Wheel) Len() int {
	w.mu.Lock()
	n := w.n
	w.mu.Unlock()
	return n
}

// unlink takes a linked t out of whichever list holds it. Caller holds w.mu.
func (w *Wheel) unlink(t *Timer) {
	if w.tail == &t.next {
		w.tail = t.pprev
	}
	*t.pprev = t.next
	if t.next != nil {
		t.next.pprev = t.pprev
	}
	t.next, t.pprev = nil, nil
}

// disarm marks an unlinked t unscheduled. Caller holds w.mu.
func (w *Wheel) disarm(t *Timer) {
	t.f = nil
	t.when.Store(0)
	w.n--
}

// own panics if a scheduled t belongs to another wheel (a caller bug that
// would otherwise corrupt both wheels' lists).
func (w *Wheel) own(t *Timer) {
	if t.w != w {
		panic("wheel: timer is scheduled on another wheel")
	}
}

// Sharded is N independent wheels, so that the lock is not a global
// contention point; the shard is chosen by a caller hint. A timer must keep
// to one shard, so the hint must be stable for the object that owns it.
type Sharded struct {
	ws []*Wheel
}

// NewSharded returns n wheels, each as New(tick, slots, start).
func NewSharded(n int, tick time.Duration, slots int, start int64) *Sharded {
	if n <= 0 {
		panic("wheel: need at least one shard")
	}
	s := &Sharded{ws: make([]*Wheel, n)}
	for i := range s.ws {
		s.ws[i] = New(tick, slots, start)
	}
	return s
}

// Shard returns the wheel for hint. Hints are mixed (Fibonacci hashing), so
// sequential ids or pointers spread evenly.
func (s *Sharded) Shard(hint uint64) *Wheel {
	return s.ws[(hint*0x9E3779B97F4A7C15>>32)%uint64(len(s.ws))]
}

// Advance advances every shard to now, one after another on the calling
// goroutine (a slow Firer in one shard delays the shards after it).
func (s *Sharded) Advance(now int64) {
	for _, w := range s.ws {
		w.Advance(now)
	}
}

// SleepUntil is Wheel.SleepUntil over every shard: the earliest of their
// answers. Each shard wakes for a Schedule before its own answer, which is
// never before the earliest, so no timer due before it is slept through.
func (s *Sharded) SleepUntil(limit int64, wake func()) int64 {
	next := limit
	for _, w := range s.ws {
		next = min(next, w.SleepUntil(limit, wake))
	}
	return next
}

// Len is the number of timers scheduled across all shards.
func (s *Sharded) Len() int {
	n := 0
	for _, w := range s.ws {
		n += w.Len()
	}
	return n
}
