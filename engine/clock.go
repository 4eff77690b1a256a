package engine

import (
	"sync/atomic"
	"time"
)

// The engine's clock (docs/engine.md, "Time"). Engine time is read once per
// tick and cached in Engine.now, so the hot paths never call time.Now; the
// tick also advances the timing wheel. While the engine is in use the
// ticker ticks every Config.Tick (10 ms). When nothing read the clock for a
// whole tick, the ticker sleeps until the next timer is due (at most the
// sweep's period, whose timer is always scheduled), so an idle broker does
// not wake a hundred times a second for nothing. Two things end a sleep
// early: an operation reading the clock (nowNanos), which first reads the
// real time itself so that it never sees a stale one, and a timer scheduled
// for a deadline before the sleep's end (wheel.Sharded.SleepUntil).

// The clock's states. The ticker moves inUse to unread at each tick, and
// unread to asleep when it goes to sleep; a read of the clock moves either
// back to inUse.
const (
	clockInUse  int32 = iota // read since the ticker last looked
	clockUnread              // not read since the last tick; the ticker still ticks
	clockAsleep              // the ticker sleeps: Engine.now is stale
)

// clockState is the ticker's side of the clock.
type clockState struct {
	state atomic.Int32
	wake  chan struct{} // the sleeping ticker's alarm; one signal is enough
}

// signal ends the ticker's sleep, if it sleeps; it never blocks.
func (c *clockState) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) readClock() int64 {
	if e.manual != nil {
		return e.manual.Now()
	}
	return time.Now().UnixNano()
}

// nowNanos is engine time as of the last tick (coarse, cheap to read): one
// atomic load of the clock's state besides the time itself, unless the
// ticker has stopped looking.
func (e *Engine) nowNanos() int64 {
	if e.clock.state.Load() != clockInUse {
		return e.useClock()
	}
	return e.now.Load()
}

// useClock marks the clock read. A sleeping ticker's time is stale: it is
// read anew before any reader can see the clock in use again, and the
// ticker is woken to tick on.
func (e *Engine) useClock() int64 {
	if e.clock.state.Load() == clockAsleep {
		e.now.Store(e.readClock())
	}
	if e.clock.state.Swap(clockInUse) == clockAsleep {
		e.clock.signal()
	}
	return e.now.Load()
}

// run is the ticker (a real clock only; with Config.Clock set, the caller
// calls Tick).
func (e *Engine) run() {
	defer close(e.done)
	t := time.NewTimer(e.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		case <-e.clock.wake:
			// Read while asleep, or a timer due before the sleep's end.
		}
		e.Tick()
		t.Reset(e.untilNextTick())
	}
}

// untilNextTick is how long the ticker waits after a tick: Config.Tick
// while the clock is read, and when it was not read for a whole tick, until
// the next timer is due (the wheel then wakes the ticker for an earlier
// one). Called by the ticker after Tick.
func (e *Engine) untilNextTick() time.Duration {
	switch e.clock.state.Load() {
	case clockInUse:
		e.clock.state.CompareAndSwap(clockInUse, clockUnread)
		return e.cfg.Tick
	case clockUnread:
		if !e.clock.state.CompareAndSwap(clockUnread, clockAsleep) {
			return e.cfg.Tick // read just now
		}
	}
	// Not read for a whole tick: just gone asleep, or asleep still (the
	// sleep ended on time and nothing read the clock). Sleep again.
	now := e.now.Load()
	next := e.wheels.SleepUntil(now+int64(e.cfg.SweepEvery), e.clock.signal)
	return max(time.Duration(next-now), e.cfg.Tick)
}

// Tick reads the clock and fires every timer that is due: lease expiry, ttl,
// parked-pop timeouts and window buffers, idle collection (P5).
func (e *Engine) Tick() {
	now := e.readClock()
	e.now.Store(now)
	e.wheels.Advance(now)
}
