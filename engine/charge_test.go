package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// D5, engine.md (what the budgets count): the footprint is payload bytes plus
// the charge of every object, counted exactly; a queue's own bytes stay
// payload bytes.
func TestFootprintCountsEachObjectsCharge(t *testing.T) {
	h := newHarness(t, nil)
	c := &h.e.charge
	want := int64(0)
	step := func(what string, add int64) {
		t.Helper()
		want += add
		if got := h.e.CellBytes(); got != want {
			t.Fatalf("after %s: cell bytes %d, want %d", what, got, want)
		}
		if got := tenantFootprint(h.e, "default"); got != want {
			t.Fatalf("after %s: tenant footprint %d, want %d", what, got, want)
		}
	}
	h.push("q", "p", "abc")
	step("a push creating q and p", 3+c.ofQueue("q")+c.ofPartition("p")+2*c.slot) // a ring of 2 slots
	h.push("q", "p", "de", "f")
	step("a push growing the ring to 4", 3+2*c.slot)
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	step("a pop creating g, its cursor and a lease of 2", c.ofGroup("g")+c.cursor+2*c.entry)
	_, parked := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g"}) // g's lease is live: it parks
	step("a parked pop", c.parked)
	if !h.e.Cancel(parked) {
		t.Fatal("cancel failed")
	}
	step("the parked pop cancelled", -c.parked)
	h.ack("q", "g", AckCompleted, ms...)
	step("the lease settled (the window keeps its capacity)", 0)
	if qi := h.infoOf("q"); qi.Bytes != 6 {
		t.Fatalf("queue bytes %d, want payload bytes only (6)", qi.Bytes)
	}
	h.advance(h.e.cfg.GroupIdle + h.e.cfg.SweepEvery)
	step("g forgotten", -(c.ofGroup("g") + c.cursor + 2*c.entry))
	if _, err := h.e.Delete("default", "q"); err != nil {
		t.Fatal(err)
	}
	step("q deleted", -want)
}

// D5, engine.md (what the budgets count): after everything is deleted,
// collected, answered or cancelled, the footprint is exactly 0.
func TestFootprintReturnsToZeroWhenEverythingGoes(t *testing.T) {
	h := newHarness(t, nil)
	// Implicit and declared queues, partitions, groups, cursors, leases,
	// windows and parked pops of every kind.
	h.configure("declared", declare(HasPolicy|HasMaxLength, Options{Policy: PolicyDropOldest, MaxLength: 50}))
	for i := 0; i < 20; i++ {
		h.push("declared", numbered("p", 20)[i], numbered("m", 10)...)
		h.push("inbox"+numbered("", 20)[i], "", "reply")
	}
	h.pop(PopRequest{Queue: "declared", Group: "lease", Batch: 100})
	h.pop(PopRequest{Queue: "declared", Group: "auto", Batch: 100, AutoAck: true})
	h.pop(PopRequest{Queue: "inbox3", Batch: 1})
	answered, _ := h.park(PopRequest{Queue: "empty", Group: "w"})
	_, cancelled := h.park(PopRequest{Queue: "empty", Partition: "x", Group: "w2"})
	h.park(PopRequest{Queue: "declared2", Group: "w"}) // answered by the delete
	h.push("empty", "", "wake")
	if !answered.isDone() || !h.e.Cancel(cancelled) {
		t.Fatal("the parked pops were not answered and cancelled")
	}
	if h.e.CellBytes() <= h.e.arena.Held() {
		t.Fatalf("cell bytes %d, want more than the %d payload bytes", h.e.CellBytes(), h.e.arena.Held())
	}
	// Idle implicit queues are collected; the rest are deleted.
	h.advance(h.e.cfg.ImplicitIdle + h.e.cfg.SweepEvery)
	for _, q := range h.e.Queues("default", nil) {
		if _, err := h.e.Delete("default", q.Name); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.e.CellBytes(); got != 0 || tenantFootprint(h.e, "default") != 0 || h.e.arena.Held() != 0 {
		t.Fatalf("after everything went: cell bytes %d, tenant %d, arena %d; want 0", got, tenantFootprint(h.e, "default"), h.e.arena.Held())
	}
}

// D7, D14, engine.md (what the budgets count): creating a queue, partition or
// group, or parking a pop, past the tenant's allowance is a 403, by push, pop
// or configure; nothing is created.
func TestCreationPastTheTenantAllowanceIsRefused(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "abc")
	h.pop(PopRequest{Queue: "q", Group: "g", Batch: 1, AutoAck: true})
	h.e.SetTenantLimits("default", h.e.CellBytes(), 0) // full to the byte
	refusals := map[string]error{
		"push to a new queue":     pushErr(h, "q2", "p", ""),
		"push to a new partition": pushErr(h, "q", "p2", ""),
		"empty push, new queue":   emptyPushErr(h, "q3", "p"),
		"pop creating a group":    popErr(h, PopRequest{Queue: "q", Group: "g2"}),
		"pop creating a queue":    popErr(h, PopRequest{Queue: "q4"}),
		"pop creating partition":  popErr(h, PopRequest{Queue: "q", Partition: "p3", Group: "g"}),
		"pop that would park":     popErr(h, PopRequest{Queue: "q", Group: "g", Wait: true, Timeout: time.Minute}),
		"configure a new queue":   h.e.Configure("default", "q5", OptionSet{}),
		"check before declaring":  h.e.CheckDeclare("default", "q5"),
	}
	for what, err := range refusals {
		if err != ErrTenantBytes {
			t.Errorf("%s: %v, want ErrTenantBytes", what, err)
		}
	}
	if qs := h.e.Queues("default", nil); len(qs) != 1 || qs[0].Partitions != 1 || qs[0].Groups != 1 {
		t.Fatalf("listing %+v, want q alone with one partition and one group", qs)
	}
	// A pop that finds messages still answers: it creates nothing.
	h.push("q", "p", "") // an empty payload adds no byte, and the ring has room
	if got := h.pop(PopRequest{Queue: "q", Group: "g", AutoAck: true}); len(got) != 1 {
		t.Fatalf("pop of an existing group got %d messages, want 1", len(got))
	}
}

// D7, engine.md (what the budgets count): past the broker's total the same
// creations are a 503, and the tenant's 403 comes first when both would refuse.
func TestCreationPastTheBrokerTotalIsRefusedAfterTheTenant(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "abc")
	h.pop(PopRequest{Queue: "q", Group: "old", AutoAck: true})
	h.e.cfg.MaxBytes = h.e.CellBytes()
	if err := popErr(h, PopRequest{Queue: "q", Group: "old", Wait: true, Timeout: time.Minute}); err != ErrBrokerFull {
		t.Fatalf("a pop that would park past the broker total: %v, want ErrBrokerFull", err)
	}
	if err := pushErr(h, "q", "p2", ""); err != ErrBrokerFull {
		t.Fatalf("new partition past the broker total: %v, want ErrBrokerFull", err)
	}
	if err := popErr(h, PopRequest{Queue: "q", Group: "g"}); err != ErrBrokerFull {
		t.Fatalf("new group past the broker total: %v, want ErrBrokerFull", err)
	}
	h.e.SetTenantLimits("default", h.e.CellBytes(), 0)
	if err := popErr(h, PopRequest{Queue: "q", Group: "g"}); err != ErrTenantBytes {
		t.Fatalf("new group past both: %v, want the tenant's ErrTenantBytes first", err)
	}
}

// D3, engine.md (what the budgets count): a creation is not refused while
// reclaimable messages could make its room; they are freed first.
func TestCreationFreesReclaimableBeforeRefusing(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", string(make([]byte, 1000)))
	h.pop(PopRequest{Queue: "q", Group: "g", AutoAck: true}) // now reclaimable
	h.e.cfg.MaxBytes = h.e.CellBytes()
	if err := popErr(h, PopRequest{Queue: "q", Group: "g2"}); err != nil {
		t.Fatalf("a new group with 1000 reclaimable bytes held: %v, want admitted", err)
	}
	if b := h.infoOf("q").Bytes; b != 0 {
		t.Fatalf("queue bytes %d, want the reclaimable message freed", b)
	}
}

// engine.md (what the budgets count): Charge counts memory outside the engine
// against the broker total without refusing, pushes past the total are
// refused, and Release gives it back.
func TestChargeAndRelease(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxBytes = 1000 })
	h.e.Charge(600)
	if h.e.CellBytes() != 600 {
		t.Fatalf("charge 600: cell=%d", h.e.CellBytes())
	}
	h.e.Charge(500)
	if h.e.CellBytes() != 1100 {
		t.Fatalf("charge past the total: cell=%d, want 1100 (never refused)", h.e.CellBytes())
	}
	if err := pushErr(h, "q", "", "x"); err != ErrBrokerFull {
		t.Fatalf("push with the total charged: %v, want ErrBrokerFull", err)
	}
	h.e.Release(1100)
	if h.e.CellBytes() != 0 {
		t.Fatalf("cell %d after release", h.e.CellBytes())
	}
	if err := pushErr(h, "q", "", "x"); err != nil {
		t.Fatalf("push after the release: %v", err)
	}
}

func pushErr(h *harness, queue, partition, payload string) error {
	_, err := h.pushErr(queue, partition, payload)
	return err
}

func emptyPushErr(h *harness, queue, partition string) error {
	_, err := h.pushErr(queue, partition)
	return err
}

func popErr(h *harness, r PopRequest) error {
	r.Tenant = "default"
	_, _, err := h.e.Pop(&r, &discard{})
	return err
}

func tenantFootprint(e *Engine, name string) int64 {
	var n int64
	e.TenantGauges(func(tenant string, bytes int64, _, _ int, _ int64) {
		if tenant == name {
			n = bytes
		}
	})
	return n
}

// D5, engine.md (what the budgets count): the names a queue, a partition
// and a group keep are charged byte for byte on top of the object's fixed
// charge (names longer than one byte, so that a per-byte charge multiplied
// and one divided differ).
func TestNamesAreChargedByteForByte(t *testing.T) {
	h := newHarness(t, nil)
	c := &h.e.charge
	h.push("queue-7", "part-12", "abc") // 7 and 7 bytes of names
	want := 3 + (c.queue + 7) + (c.partition + 7) + 2*c.slot
	if got := h.e.CellBytes(); got != want {
		t.Fatalf("after a push creating queue-7/part-12: cell bytes %d, want %d", got, want)
	}
	h.pop(PopRequest{Queue: "queue-7", Group: "group-abcd", AutoAck: true}) // 10 bytes; autoAck keeps no window
	want += (c.group + 10) + c.cursor
	if got := h.e.CellBytes(); got != want {
		t.Fatalf("after a pop creating group-abcd: cell bytes %d, want %d", got, want)
	}
	if got := tenantFootprint(h.e, "default"); got != want {
		t.Fatalf("tenant footprint %d, want %d", got, want)
	}
}

// D7, engine.md (what the budgets count): a dropOldest push is checked on
// what it adds net of what it drops, its ring growth included. Each case is
// run against the tenant's allowance and against the broker's total.
func TestDropOldestPushIsCheckedNetOfItsDrops(t *testing.T) {
	limits := map[string]struct {
		set  func(h *harness, max int64)
		want error
	}{
		"tenant": {func(h *harness, max int64) { h.e.SetTenantLimits("default", max, 0) }, ErrTenantBytes},
		"broker": {func(h *harness, max int64) { h.e.cfg.MaxBytes = max }, ErrBrokerFull},
	}
	for name, l := range limits {
		t.Run(name, func(t *testing.T) {
			// A push that drops as many bytes as it adds but grows the ring
			// (2 slots held in a ring of 2, one more appended before the drop)
			// is refused at the bound: the growth counts.
			h := newHarness(t, nil)
			h.configure("q", declare(HasPolicy|HasMaxLength, Options{Policy: PolicyDropOldest, MaxLength: 2}))
			h.push("q", "p", "a", "b")
			l.set(h, h.e.CellBytes())
			if _, err := h.pushErr("q", "p", "c"); err != l.want {
				t.Fatalf("a push growing the ring at the bound: %v, want %v", err, l.want)
			}

			// With room in the ring, a push of 2 bytes that drops 1 adds 1:
			// admitted when that fills the bound exactly.
			h = newHarness(t, nil)
			h.configure("q", declare(HasPolicy|HasMaxLength, Options{Policy: PolicyDropOldest, MaxLength: 3}))
			h.push("q", "p", "a", "b", "c") // a ring of 4
			before := h.e.CellBytes()
			l.set(h, before+1)
			if n, err := h.pushErr("q", "p", "dd"); err != nil || n != 1 {
				t.Fatalf("a push adding 1 byte net at 1 byte of room: n=%d err=%v, want admitted", n, err)
			}
			if got := h.e.CellBytes(); got != before+1 {
				t.Fatalf("cell bytes %d, want %d", got, before+1)
			}

			// A push that adds no more than it drops is admitted even over a
			// bound lowered below what is held.
			l.set(h, h.e.CellBytes()-1)
			if n, err := h.pushErr("q", "p", "e"); err != nil || n != 1 {
				t.Fatalf("a push adding nothing net over the bound: n=%d err=%v, want admitted", n, err)
			}
			if qi := h.infoOf("q"); qi.Depth != 3 || qi.Bytes != 4 {
				t.Fatalf("depth %d bytes %d, want c,dd,e held: 3 messages, 4 bytes", qi.Depth, qi.Bytes)
			}
		})
	}
}

// D7: a push refused by the broker's total leaves the tenant's footprint as
// it was (the tenant's part of the reservation is given back too).
func TestBrokerRefusalLeavesTheTenantFootprint(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a")
	h.e.cfg.MaxBytes = h.e.CellBytes()
	before := tenantFootprint(h.e, "default")
	if err := pushErr(h, "q", "p", "b"); err != ErrBrokerFull {
		t.Fatalf("push past the broker total: %v, want ErrBrokerFull", err)
	}
	if got := tenantFootprint(h.e, "default"); got != before {
		t.Fatalf("tenant footprint %d after the refusal, want %d", got, before)
	}
}

// D14, engine.md (what the budgets count): CheckDeclare asks whether a
// configure would fit without taking anything.
func TestCheckDeclareTakesNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a")
	before := h.e.CellBytes()
	if err := h.e.CheckDeclare("default", "new-queue"); err != nil {
		t.Fatal(err)
	}
	if got := h.e.CellBytes(); got != before {
		t.Fatalf("cell bytes %d after CheckDeclare, want %d", got, before)
	}
}

// engine.md (what the budgets count): rings are charged by capacity, as
// they grow (to the next power of two that holds the push) and as they
// shrink (to a quarter once a ring of more than 64 slots holds less than an
// eighth of them; none once a ring of more than 8 holds nothing).
func TestRingIsChargedByCapacityAsItGrowsAndShrinks(t *testing.T) {
	h := newHarness(t, nil)
	c := &h.e.charge
	slots := func(q string) int64 {
		t.Helper()
		rest := h.e.CellBytes() - h.infoOf(q).Bytes - c.ofQueue(q) - c.ofPartition("p")
		if rest%c.slot != 0 {
			t.Fatalf("%d bytes charged beyond payload, queue and partition: not whole slots", rest)
		}
		return rest / c.slot
	}
	maxLength := func(n int64) {
		h.configure("q", declare(HasPolicy|HasMaxLength, Options{Policy: PolicyDropOldest, MaxLength: n}))
	}
	step := func(what string, want int64) {
		t.Helper()
		if got := slots("q"); got != want {
			t.Fatalf("%s: a ring of %d slots, want %d", what, got, want)
		}
	}
	maxLength(1000)
	h.push("q", "p", "a", "b")
	step("2 messages", 2)
	h.push("q", "p", "c", "d")
	step("4 messages", 4)
	h.push("q", "p", numbered("m", 123)...)
	step("127 messages", 128)
	maxLength(16)
	h.push("q", "p", "x") // 128 held, 112 dropped: 16 held, an eighth exactly
	step("16 held of 128", 128)
	maxLength(15)
	h.push("q", "p", "y") // 15 held: less than an eighth
	step("15 held of 128", 32)
	maxLength(1000)
	h.push("q", "p", numbered("n", 40)...) // 55 held
	step("55 held", 64)
	maxLength(7)
	h.push("q", "p", "z") // 7 held of 64: not more than 64 slots
	step("7 held of 64", 64)
	if _, err := h.e.Reset("default", "q"); err != nil {
		t.Fatal(err)
	}
	step("nothing held of 64", 0)

	h = newHarness(t, nil)
	h.push("q2", "p", numbered("m", 5)...)
	if got := slots("q2"); got != 8 {
		t.Fatalf("5 messages: a ring of %d slots, want 8", got)
	}
	if _, err := h.e.Reset("default", "q2"); err != nil {
		t.Fatal(err)
	}
	if got := slots("q2"); got != 8 {
		t.Fatalf("nothing held of 8: a ring of %d slots, want 8 kept", got)
	}
}

// D7, engine.md (what the budgets count): a push is admitted when its
// payload and the ring growth it causes fill the bound exactly.
func TestPushGrowingTheRingFillsTheBoundExactly(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b") // a ring of 2
	limit := h.e.CellBytes() + 2 + 2*h.e.charge.slot
	h.e.SetTenantLimits("default", limit, 0)
	if n, err := h.pushErr("q", "p", "c", "d"); err != nil || n != 2 {
		t.Fatalf("a push filling the allowance with its ring growth: n=%d err=%v, want admitted", n, err)
	}
	if got := h.e.CellBytes(); got != limit {
		t.Fatalf("cell bytes %d, want %d", got, limit)
	}
}

// D5, engine.md (what the budgets count): pushes and pops racing to create
// the same queue, partition and group charge each once. A push that loses
// the race to publish a fresh queue or partition, and a pop that loses the
// race to add a group or a partition, give back what they reserved, so after every queue is
// deleted the footprint is exactly 0 again. The racers start together on
// fresh names, round after round, so that some of them lose.
func TestRacingCreationsAreChargedOnce(t *testing.T) {
	h := newHarness(t, nil)
	h.push("groups", "", "m")
	h.push("parts", "", "m")
	const rounds, racers = 3000, 4
	names := numbered("n", rounds)
	race := func(do func() error) {
		t.Helper()
		var ready atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, racers)
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ready.Add(1)
				for ready.Load() < racers { // all set off together
					runtime.Gosched()
				}
				if err := do(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		race(func() error { // a fresh queue and partition
			_, err := h.e.Push("default", n, "p", payloads("x"))
			return err
		})
		race(func() error { // a fresh group of a queue that is there
			_, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "groups", Group: n}, &collector{})
			return err
		})
		race(func() error { // a fresh partition named by a pop
			_, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "parts", Partition: n, Group: "g"}, &collector{})
			return err
		})
	}
	for _, q := range h.e.Queues("default", nil) {
		if _, err := h.e.Delete("default", q.Name); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.e.CellBytes(); got != 0 || tenantFootprint(h.e, "default") != 0 {
		t.Fatalf("after every queue was deleted: cell bytes %d, tenant %d; want 0", got, tenantFootprint(h.e, "default"))
	}
}

// D7, engine.md (what the budgets count): an empty push that creates its
// queue and partition adds their charges and no ring, so it is admitted
// when those charges fill the tenant's allowance exactly.
func TestEmptyPushCreatingItsQueueFillsTheAllowanceExactly(t *testing.T) {
	h := newHarness(t, nil)
	c := &h.e.charge
	want := c.ofQueue("q") + c.ofPartition("p")
	h.e.SetTenantLimits("default", want, 0)
	if n, err := h.e.Push("default", "q", "p", nil); n != 0 || err != nil {
		t.Fatalf("empty push: n=%d err=%v, want 0 and admitted", n, err)
	}
	if got := tenantFootprint(h.e, "default"); got != want || !h.listed("q") {
		t.Fatalf("footprint %d (want %d), q listed %v", got, want, h.listed("q"))
	}
}
