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
	idle(30 * time.Second)
	if h.e.arena.Pooled() != pooled || freed != 0 {
		t.Fatalf("after one period: pooled %d (want %d kept: the first trim saw an empty pool), freed %d", h.e.arena.Pooled(), pooled, freed)
	}
	idle(30 * time.Second)
	if h.e.arena.Pooled() != 0 || freed != 1 {
		t.Fatalf("after a minute idle: pooled %d, FreeOSMemory called %d times; want 0 and 1", h.e.arena.Pooled(), freed)
	}
	idle(60 * time.Second)
	if freed != 1 {
		t.Fatalf("FreeOSMemory called %d times with nothing more released, want 1", freed)
	}
}
