package engine

import (
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine/wheel"
)

// These tests run the engine on the real clock: what they check is the
// ticker's own goroutine (clock.go). The sweep's period is 10 s, so a
// ticker that slept through a timer would be seconds late, far beyond the
// bounds below.

// idleEngine starts an engine on the real clock and waits until its ticker
// sleeps: nothing read the clock for a whole tick.
func idleEngine(t *testing.T) *Engine {
	t.Helper()
	e := New(Config{SweepEvery: 10 * time.Second})
	t.Cleanup(e.Close)
	deadline := time.Now().Add(5 * time.Second)
	for e.clock.state.Load() != clockAsleep {
		if time.Now().After(deadline) {
			t.Fatalf("the ticker of an unused engine never slept (state %d)", e.clock.state.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return e
}

// A sleeping ticker's time is stale; an operation reading it gets the real
// time, and wakes the ticker, which ticks on by itself.
func TestClockReadAfterSleepIsFresh(t *testing.T) {
	e := idleEngine(t)
	time.Sleep(time.Second) // the ticker's time is a second stale by now
	got := e.nowNanos()
	if lag := time.Now().UnixNano() - got; lag > int64(500*time.Millisecond) {
		t.Fatalf("engine time read after a sleep lags the real clock by %v", time.Duration(lag))
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.now.Load() <= got {
		if time.Now().After(deadline) {
			t.Fatal("the ticker did not tick again after a read woke it")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A parked pop's timeout is kept while the ticker sleeps: the pop reads the
// clock, which wakes the ticker.
func TestClockWakesForAParkedPop(t *testing.T) {
	e := idleEngine(t)
	c := &collector{e: e}
	start := time.Now()
	_, parked, err := e.Pop(&PopRequest{Tenant: "default", Queue: "q", Wait: true, Timeout: 50 * time.Millisecond}, c)
	if err != nil || parked.IsZero() {
		t.Fatalf("pop: %v, parked %v", err, !parked.IsZero())
	}
	for !c.isDone() {
		if time.Since(start) > 3*time.Second {
			t.Fatal("a 50 ms wait was not answered within 3 s of an idle engine")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fired records when a timer fired.
type fired struct {
	wheel.Timer
	at chan int64
}

func (f *fired) Fire(now int64) { f.at <- now }

// A timer scheduled with no read of the clock (a Fire re-arming itself, say)
// for a deadline before the sleep's end wakes the ticker through the wheel.
func TestClockWakesForAnEarlierTimer(t *testing.T) {
	e := idleEngine(t)
	f := &fired{at: make(chan int64, 1)}
	when := time.Now().Add(50 * time.Millisecond).UnixNano()
	e.wheels.Shard(0).Schedule(&f.Timer, when, f)
	select {
	case now := <-f.at:
		if now < when {
			t.Fatalf("fired %v early", time.Duration(when-now))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a timer due in 50 ms did not fire within 3 s of an idle engine")
	}
}
