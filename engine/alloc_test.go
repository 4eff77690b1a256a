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

// A refused push allocates nothing (issue 24): admission of the whole push
// comes before a queue or partition is built (docs/engine.md, "A refused
// push changes nothing"), so a flood of refusals does not churn the heap.
// Each case refuses a push to a queue, or a partition, that does not exist:
// the queue's own bound, the tenant's queue and byte allowances, and the
// broker's total, with and without reclaimable messages to free first (D3).
func TestRefusedPushIsAllocationFree(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxBytes = 1 << 20 })
	ps := batchOf(10, 64)
	must(t, h.e.Configure("default", "bounded", OptionSet{Has: HasMaxLength, Options: Options{MaxLength: 5}}))
	h.e.SetTenantLimits("counted", 0, 1)
	h.e.Push("counted", "only", "", ps)
	h.e.Push("small", "kept", "", batchOf(1, 2048))
	h.e.SetTenantLimits("small", tenantFootprint(h.e, "small"), 0) // spent
	// The broker's total, spent by one queue, one of whose messages was
	// consumed: reclaimable, freed before the refusal (D3), and still not
	// room enough.
	h.e.Push("default", "full", "", batchOf(1, 64))
	c := &idCollector{e: h.e}
	r := PopRequest{Tenant: "default", Queue: "full", Batch: 1}
	consume := func() {
		h.e.Push("default", "full", "", batchOf(1, 64))
		c.buf, c.items = c.buf[:0], c.items[:0]
		h.e.Pop(&r, c)
		h.e.Ack("default", "full", "", c.items, nil)
	}
	consume()
	h.e.cfg.MaxBytes = h.e.CellBytes() // no new queue fits
	for _, c := range []struct {
		name                     string
		tenant, queue, partition string
		before                   func()
		want                     error
	}{
		{"queue_full, new partition", "default", "bounded", "new", nil, ErrQueueFull},
		{"queue allowance, new queue", "counted", "new", "", nil, ErrTenantQueues},
		{"byte allowance, new queue", "small", "new", "", nil, ErrTenantBytes},
		{"byte allowance, new partition", "small", "kept", "new", nil, ErrTenantBytes},
		{"broker total, new queue", "default", "new", "", nil, ErrBrokerFull},
		{"broker total, new partition", "default", "full", "new", nil, ErrBrokerFull},
		{"broker total after a reclaim", "default", "new", "", consume, ErrBrokerFull},
	} {
		push := func() {
			if c.before != nil {
				c.before()
			}
			if _, err := h.e.Push(c.tenant, c.queue, c.partition, ps); err != c.want {
				t.Fatalf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		push()
		var before float64
		if c.before != nil {
			before = testing.AllocsPerRun(20, c.before)
		}
		if allocs := testing.AllocsPerRun(20, push) - before; allocs > 0 {
			t.Errorf("%s: a refused push allocates %.1f times", c.name, allocs)
		}
	}
}
