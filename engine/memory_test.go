package engine

import (
	"testing"
	"time"
)

// engine.md (memory goes back when the load falls): once the load is gone,
// the sweeper releases the arena's pooled segments within two trim periods
// and asks the runtime to return memory to the OS, once per period at most.
func TestIdleArenaSegmentsAreReleased(t *testing.T) {
	freed := 0
	h := newHarness(t, func(c *Config) {
		c.SegmentSize = 64 << 10
		c.FreeOSMemory = func() { freed++ }
	})
	payload := string(make([]byte, 32<<10))
	for i := 0; i < 256; i++ { // 8 MiB in 64 KiB segments
		h.push("burst", numbered("p", 256)[i], payload)
	}
	if _, err := h.e.Delete("default", "burst"); err != nil {
		t.Fatal(err)
	}
	pooled := h.e.arena.Pooled()
	if pooled < 64 { // the pool keeps up to 64 spare segments
		t.Fatalf("pooled %d segments after the burst, want the pool full (64)", pooled)
	}
	idle := func(d time.Duration) { // the sweeper runs every second
		for step := time.Duration(0); step < d; step += time.Second {
			h.advance(time.Second)
		}
	}
	idle(5 * time.Second)
	if h.e.arena.Pooled() != pooled || freed != 0 {
		t.Fatalf("after one period: pooled %d (want %d kept: the first trim saw an empty pool), freed %d", h.e.arena.Pooled(), pooled, freed)
	}
	idle(5 * time.Second)
	if h.e.arena.Pooled() != 0 || freed != 1 {
		t.Fatalf("after 10 s idle: pooled %d, FreeOSMemory called %d times; want 0 and 1", h.e.arena.Pooled(), freed)
	}
	idle(60 * time.Second)
	if freed != 1 {
		t.Fatalf("FreeOSMemory called %d times with nothing more released, want 1", freed)
	}
}

// engine.md (memory goes back when the load falls): queues that went leave
// heap the runtime keeps, so a footprint fallen by a quarter of its peak
// (and 4 MiB) asks for memory to be returned too, once, within two trim
// periods; a footprint that does not fall asks nothing.
func TestFallenFootprintReturnsMemory(t *testing.T) {
	freed := 0
	h := newHarness(t, func(c *Config) { c.FreeOSMemory = func() { freed++ } })
	names := numbered("q", 10000) // about 6.5 MiB of queue and partition charges
	for _, q := range names {
		h.push(q, "", "1")
	}
	idle := func(d time.Duration) {
		for step := time.Duration(0); step < d; step += time.Second {
			h.advance(time.Second)
		}
	}
	idle(20 * time.Second)
	if freed != 0 {
		t.Fatalf("FreeOSMemory called %d times while the footprint held, want 0", freed)
	}
	for _, q := range names {
		if _, err := h.e.Delete("default", q); err != nil {
			t.Fatal(err)
		}
	}
	idle(10 * time.Second)
	if freed != 1 {
		t.Fatalf("FreeOSMemory called %d times within 10 s of the footprint falling, want 1", freed)
	}
	idle(30 * time.Second)
	if freed != 1 {
		t.Fatalf("FreeOSMemory called %d times with nothing more freed, want 1", freed)
	}
}

// docs/engine.md (memory goes back when the load falls): the arena keeps a
// sixteenth of the broker total in free segments, between 2 and 64.
func TestSpareSegmentsAreASixteenthOfTheTotal(t *testing.T) {
	for _, tc := range []struct {
		total int64
		seg   int
		want  int
	}{
		{64 << 20, 1 << 20, 4},
		{256 << 20, 1 << 20, 16},
		{256 << 20, 0, 16}, // the default segment size, 1 MiB
		{4 << 30, 1 << 20, 64},
		{8 << 20, 1 << 20, 2},
		{64 << 20, 2 << 20, 2},
	} {
		if got := spareSegments(tc.total, tc.seg); got != tc.want {
			t.Errorf("spareSegments(%d, %d) = %d, want %d", tc.total, tc.seg, got, tc.want)
		}
	}
}

// docs/engine.md (memory goes back when the load falls): the sweeper trims
// every 5 s and no sooner; it calls FreeOSMemory when the footprint has
// fallen by at least 4 MiB and a quarter from its peak, measured at the
// trims, and at most once per 10 s. Sweep is called directly at engine
// times relative to t0, and Charge and Release move the footprint by exact
// amounts, so each step sits on a bound.
func TestFreeOSMemoryPacing(t *testing.T) {
	freed := 0
	h := newHarness(t, func(c *Config) { c.FreeOSMemory = func() { freed++ } })
	if fp := h.e.footprint.Load(); fp != 0 {
		t.Fatalf("footprint of an empty engine = %d, want 0", fp)
	}
	t0 := h.clk.Now()
	sec := int64(time.Second)
	step := func(at int64, want int, what string) {
		t.Helper()
		h.e.Sweep(t0 + at)
		if freed != want {
			t.Fatalf("%s: FreeOSMemory called %d times, want %d", what, freed, want)
		}
	}
	h.e.Charge(16 << 20)
	step(0, 0, "a first trim at a 16 MiB peak, nothing fallen")
	h.e.Release(4 << 20) // fallen by exactly 4 MiB, a quarter of the peak
	step(5*sec-1, 0, "1 ns before the next trim is due")
	step(5*sec, 1, "the trim 5 s on, the footprint fallen by exactly 4 MiB and a quarter")
	h.e.Release(6 << 20) // 12 MiB is the peak since the call; fallen by half
	step(10*sec, 1, "5 s after the call")
	step(15*sec, 2, "exactly 10 s after the call")
	h.e.Release(6 << 20)
	step(20*sec, 2, "5 s after the second call")
}
