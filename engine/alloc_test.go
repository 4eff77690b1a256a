package engine

import (
	"testing"
	"time"
)

// P3: no per-message heap allocation on push, pop and ack. These pin the
// steady state at zero allocations per call.

func TestPushIsAllocationFree(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxBytes = 1 << 30 })
	must(t, h.e.Configure("default", "q", OptionSet{Has: HasMaxLength | HasMaxBytes, Options: Options{MaxLength: 1_000_000, MaxBytes: 1 << 29}}))
	ps := batchOf(100, 64)
	h.e.Push("default", "q", "p", ps) // create queue and partition
	h.e.Reset("default", "q")
	// Grow the ring once so the measured pushes do not.
	for i := 0; i < 20; i++ {
		h.e.Push("default", "q", "p", ps)
	}
	h.e.Reset("default", "q")
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := h.e.Push("default", "q", "p", ps); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("push of 100 payloads allocates %.1f times", allocs)
	}
}

func TestPopAndAckAreAllocationFree(t *testing.T) {
	h := newHarness(t, nil)
	ps := batchOf(100, 64)
	for i := 0; i < 20; i++ {
		h.e.Push("default", "q", "p", ps)
	}
	c := &idCollector{e: h.e, buf: make([]byte, 0, 4096), items: make([]AckItem, 0, 100)}
	out := make([]Outcome, 0, 100)
	r := PopRequest{Tenant: "default", Queue: "q", Group: "g", Batch: 10}
	cycle := func() {
		c.buf, c.items = c.buf[:0], c.items[:0]
		n, _, err := h.e.Pop(&r, c)
		if err != nil || n != 10 {
			t.Fatalf("pop: n=%d err=%v", n, err)
		}
		out, _ = h.e.Ack("default", "q", "g", c.items, out[:0])
		if len(out) != 10 || out[9] != OutcomeAcked {
			t.Fatalf("ack: %v", out)
		}
	}
	cycle() // create the group and its cursor
	if allocs := testing.AllocsPerRun(50, cycle); allocs != 0 {
		t.Fatalf("pop+ack of 10 allocates %.1f times", allocs)
	}
	d := &discard{}
	ra := PopRequest{Tenant: "default", Queue: "q", Group: "auto", Batch: 10, AutoAck: true}
	h.e.Pop(&ra, d)
	if allocs := testing.AllocsPerRun(50, func() { h.e.Pop(&ra, d) }); allocs != 0 {
		t.Fatalf("autoAck pop of 10 allocates %.1f times", allocs)
	}
}

// A parked pop costs one waiter (memory, no goroutine, P5); the push that
// completes it allocates nothing more.
func TestParkedPopCostsOneAllocation(t *testing.T) {
	h := newHarness(t, nil)
	reply := batchOf(1, 64)
	d := &discard{}
	r := PopRequest{Tenant: "default", Queue: "inbox", Batch: 1, AutoAck: true, Wait: true, Timeout: time.Minute}
	roundTrip := func() {
		if _, parked, _ := h.e.Pop(&r, d); parked.IsZero() {
			t.Fatal("pop did not park")
		}
		h.e.Push("default", "inbox", "", reply)
	}
	roundTrip()
	if allocs := testing.AllocsPerRun(50, roundTrip); allocs > 1 {
		t.Fatalf("a parked round trip allocates %.1f times", allocs)
	}
}
