package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// D3: before any group exists the reclaim point is at the start: everything held is pending.
func TestReclaimPointStartsAtTheStart(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b", "c")
	if qi := h.infoOf("q"); qi.Depth != 3 || qi.Bytes != 3 {
		t.Fatalf("depth=%d bytes=%d, want 3 and 3", qi.Depth, qi.Bytes)
	}
}

// D3: the reclaim point is the lowest cursor among the groups that exist; messages below it are not pending.
func TestReclaimPointIsLowestCursorAmongGroups(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b", "c", "d")
	h.ack("q", "slow", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "slow"})...)
	h.ack("q", "fast", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "fast", Batch: 4})...)
	qi, d := h.infoOf("q"), h.depthOf("q", "")
	if qi.Depth != 3 || d.Pending != 3 || d.Bytes != 4 || qi.Bytes != 4 {
		t.Fatalf("depth=%d pending=%d bytes=%d/%d, want 3 pending (slow settled 1) and 4 bytes held", qi.Depth, d.Pending, qi.Bytes, d.Bytes)
	}
	h.ack("q", "slow", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "slow", Batch: 2})...)
	if qi := h.infoOf("q"); qi.Depth != 1 || qi.Bytes != 4 {
		t.Fatalf("after slow settled 3: depth=%d bytes=%d, want 1 and 4", qi.Depth, qi.Bytes)
	}
}

// D3: the reclaim point only moves forward: a new group starting below it does not move it back.
func TestReclaimPointNeverMovesBack(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b", "c")
	h.ack("q", "g1", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g1", Batch: 3})...)
	if d := h.infoOf("q").Depth; d != 0 {
		t.Fatalf("depth %d after the only group consumed all", d)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g2"})); got != "a" {
		t.Fatalf("new group started at %q, want the oldest held", got)
	}
	d := h.depthOf("q", "")
	if d.Pending != 0 || h.infoOf("q").Depth != 0 {
		t.Fatalf("queue pending %d after a new group started below the reclaim point, want 0", d.Pending)
	}
	if gd := groupDepth(t, d, "g2"); gd.Pending != 3 {
		t.Fatalf("g2 pending %d, want 3", gd.Pending)
	}
}

// spec: a second group over the same ring receives everything the first one consumed.
func TestSecondGroupReadsWhatTheFirstConsumed(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	h.ack("q", "g1", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g1", Batch: 10})...)
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g2", Batch: 10})
	if payloadsOf(ms) != "a,b,c" || attemptsOf(ms) != "0,0,0" {
		t.Fatalf("second group got %q attempts %s", payloadsOf(ms), attemptsOf(ms))
	}
}

// D3 + D5: reclaimable messages are freed when the queue needs the room; a late group below them counts them as skipped.
func TestReclaimUnderRoomPressureCountsSkippedForLateGroup(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 4}))
	h.push("q", "", "m0", "m1", "m2", "m3")
	h.ack("q", "g1", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g1", Batch: 4})...)
	late := h.pop(PopRequest{Queue: "q", Group: "late"}) // m0, in flight
	if payloadsOf(late) != "m0" {
		t.Fatalf("late group started at %q", payloadsOf(late))
	}
	h.push("q", "", "n0", "n1") // needs two slots: m0 and m1 are reclaimable
	qi := h.infoOf("q")
	if qi.Depth != 2 || qi.Bytes != 8 || qi.Drops.Bounds != 0 || qi.Drops.TTL != 0 {
		t.Fatalf("depth=%d bytes=%d drops=%+v, want 2, 8, no drops (reclaim is not a drop)", qi.Depth, qi.Bytes, qi.Drops)
	}
	d := h.depthOf("q", "")
	if gd := groupDepth(t, d, "late"); gd.Skipped != 1 {
		t.Fatalf("late skipped %d, want 1 (m1 freed before delivery; m0 had been delivered)", gd.Skipped)
	}
	if gd := groupDepth(t, d, "g1"); gd.Skipped != 0 || gd.Pending != 2 {
		t.Fatalf("g1 skipped=%d pending=%d, want 0 and 2", gd.Skipped, gd.Pending)
	}
	if got := outcomes(h.ack("q", "late", AckCompleted, late...)); got != "[unknown]" {
		t.Fatalf("ack of a freed in-flight message: %s, want unknown", got)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "late", Batch: 10})); got != "m2,m3,n0,n1" {
		t.Fatalf("late group then got %q", got)
	}
}

// D3 + D5 + engine.md: a reclaimable message freed by dropOldest room pressure is not a bounds drop.
func TestReclaimIsNotCountedAsADrop(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 2, Policy: PolicyDropOldest}))
	h.push("q", "", "a", "b")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})...)
	h.push("q", "", "c", "d")
	if qi := h.infoOf("q"); qi.Drops != (Drops{}) || h.e.Drops(CauseBounds) != 0 {
		t.Fatalf("drops %+v after freeing consumed messages", qi.Drops)
	}
}

// D4: a group idle for QUEEN_EPHEMERAL_GROUP_IDLE_S (300 s) is forgotten: its cursor stops pinning messages.
func TestForgottenGroupStopsPinningMessages(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b", "c")
	h.ack("q", "idle", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "idle"})...)
	h.ack("q", "busy", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "busy", Batch: 3})...)
	if d := h.infoOf("q").Depth; d != 2 {
		t.Fatalf("depth %d, want 2 pinned by the idle group", d)
	}
	h.advance(200 * time.Second)
	h.pop(PopRequest{Queue: "q", Group: "busy"}) // busy stays active
	h.advance(99 * time.Second)
	if qi := h.infoOf("q"); qi.Groups != 2 || qi.Depth != 2 {
		t.Fatalf("at 299 s: groups=%d depth=%d, want the idle group still there", qi.Groups, qi.Depth)
	}
	h.advance(time.Second)
	qi := h.infoOf("q")
	if qi.Groups != 1 || qi.Depth != 0 || qi.Bytes != 3 {
		t.Fatalf("at 300 s: groups=%d depth=%d bytes=%d, want the idle group forgotten, nothing pending, 3 held", qi.Groups, qi.Depth, qi.Bytes)
	}
	d := h.depthOf("q", "")
	if len(d.Groups) != 1 || d.Groups[0].Group != "busy" {
		t.Fatalf("groups %+v, want busy only", d.Groups)
	}
}

// D4: a later pop with a forgotten group's name is a new group, starting at the oldest message held.
func TestForgottenGroupNameStartsAsNewGroup(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.GroupIdle = 10 * time.Second })
	h.configure("q", OptionSet{})
	h.push("q", "", "a", "b", "c")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})...)
	h.advance(11 * time.Second)
	if qi := h.infoOf("q"); qi.Groups != 0 {
		t.Fatalf("groups %d, want g forgotten", qi.Groups)
	}
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})
	if payloadsOf(ms) != "a,b,c" || attemptsOf(ms) != "0,0,0" {
		t.Fatalf("the name reused got %q, want a new group from the oldest held", payloadsOf(ms))
	}
}

// D4: acks keep a group alive (forgotten only after neither popping nor acking).
func TestAckKeepsGroupAlive(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.GroupIdle = 10 * time.Second })
	h.configure("q", declare(HasLeaseSeconds, Options{LeaseSeconds: 3600}))
	h.push("q", "", "a", "b")
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	h.advance(8 * time.Second)
	h.ack("q", "g", AckCompleted, ms[0])
	h.advance(8 * time.Second) // 16 s since the pop, 8 s since the ack
	if qi := h.infoOf("q"); qi.Groups != 1 {
		t.Fatalf("group forgotten %v after its last ack", 8*time.Second)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, ms[1])); got != "[acked]" {
		t.Fatalf("the lease of a live group: %s", got)
	}
	h.advance(10 * time.Second)
	if qi := h.infoOf("q"); qi.Groups != 0 {
		t.Fatalf("groups %d, want forgotten 10 s after the last ack", qi.Groups)
	}
}

// engine.md (groups): a group with a parked pop is not forgotten while it waits.
func TestGroupWithParkedPopIsNotForgotten(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.GroupIdle = 10 * time.Second })
	h.configure("q", OptionSet{})
	c, _ := h.park(PopRequest{Queue: "q", Group: "g", Timeout: time.Minute})
	h.advance(30 * time.Second)
	if qi := h.infoOf("q"); qi.Groups != 1 {
		t.Fatalf("a group with a parked pop was forgotten")
	}
	h.push("q", "", "a")
	if !c.done || payloadsOf(c.msgs) != "a" {
		t.Fatalf("the parked pop: done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D4: a forgotten group's lease is voided: its in-flight messages' acks answer unknown.
func TestForgottenGroupLeaseIsVoided(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.GroupIdle = 10 * time.Second })
	h.configure("q", declare(HasLeaseSeconds, Options{LeaseSeconds: 3600}))
	h.push("q", "", "a")
	ms := h.pop(PopRequest{Queue: "q", Group: "g"})
	h.advance(11 * time.Second)
	if got := outcomes(h.ack("q", "g", AckCompleted, ms...)); got != "[unknown]" {
		t.Fatalf("ack for a forgotten group: %s, want unknown", got)
	}
}

// D4: a new group starts at the oldest message held (reclaimable included), not at the reclaim point or the tail.
func TestNewGroupStartsAtOldestHeld(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 3}))
	h.push("q", "", "a", "b", "c")
	h.ack("q", "g1", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g1", Batch: 3})...)
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g2", AutoAck: true})); got != "a" {
		t.Fatalf("g2 started at %q, want a", got)
	}
	h.push("q", "", "d") // frees a (reclaimable) to make room
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g3", Batch: 10, AutoAck: true})); got != "b,c,d" {
		t.Fatalf("g3 got %q, want from the new oldest held, b", got)
	}
}

// D5: skipped counts messages freed before they were ever delivered to that group, under dropOldest too.
func TestBoundsDropCountsSkippedForGroupBelow(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 3, Policy: PolicyDropOldest}))
	h.push("q", "", "a", "b", "c")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g"})...) // a settled, reclaim at b
	h.push("q", "", "d", "e", "f")                                              // frees a, drops b and c
	d := h.depthOf("q", "")
	if gd := groupDepth(t, d, "g"); gd.Skipped != 2 || gd.Pending != 3 {
		t.Fatalf("g skipped=%d pending=%d, want 2 (b, c never delivered) and 3", gd.Skipped, gd.Pending)
	}
	if qi := h.infoOf("q"); qi.Drops.Bounds != 2 {
		t.Fatalf("bounds drops %d, want 2", qi.Drops.Bounds)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "d,e,f" {
		t.Fatalf("g then got %q", got)
	}
}

// D3 + D4: the reclaim point is the lowest cursor among the groups that exist. A group that exists
// (it popped another partition) but has not read this partition would start here at the oldest
// message held, so it pins this partition's messages: they stay pending, not reclaimable.
func TestReclaimPointWaitsForExistingGroupThatHasNotReadThePartition(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "a", "b")
	h.push("q", "p2", "c")
	h.ack("q", "audit", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "p2", Group: "audit"})...) // audit exists
	h.ack("q", "widget", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "widget", Batch: 2})...)
	d := h.depthOf("q", "")
	if p := partitionDepth(t, d, "p1"); p.Pending != 2 {
		t.Fatalf("p1 pending %d, want 2: audit exists and has not passed a, b", p.Pending)
	}
	if a := groupDepth(t, d, "audit"); a.Pending != 2 {
		t.Fatalf("audit pending %d, want 2", a.Pending)
	}
	// c was consumed by every group that existed then (audit); widget started
	// later, below the reclaim point, which never moves back (D3): c stays
	// reclaimable, not pending, though widget can still read it.
	if qi := h.infoOf("q"); qi.Depth != 2 {
		t.Fatalf("listing depth %d, want 2 (a, b unread by audit)", qi.Depth)
	}
	if w := groupDepth(t, d, "widget"); w.Pending != 1 {
		t.Fatalf("widget pending %d, want 1 (c, which it can still read)", w.Pending)
	}
}

// D3 + engine.md (time): reclaimable messages are freed when the broker is near its total budget (above 7/8).
func TestReclaimableFreedWhenBrokerNearBudget(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 80 })
	h.push("q", "", strings.Repeat("x", 71)) // above 70 = 7/8 of 80
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g"})...)
	h.advance(time.Second)
	if h.e.CellBytes() != 0 {
		t.Fatalf("cell bytes %d after a sweep near the budget, want reclaimable freed", h.e.CellBytes())
	}
}

// D3: far from every budget, reclaimable messages are kept (so a later group can read them).
func TestReclaimableKeptWhenNoPressure(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 80 })
	h.configure("q", OptionSet{})
	h.push("q", "", strings.Repeat("x", 60))
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g"})...)
	h.advance(10 * time.Second)
	if h.e.CellBytes() != 60 {
		t.Fatalf("cell bytes %d, want the consumed message still held", h.e.CellBytes())
	}
	if ms := h.pop(PopRequest{Queue: "q", Group: "late"}); len(ms) != 1 {
		t.Fatal("a later group could not read the consumed message")
	}
}

// D5: skipped is the difference between a slow consumer and one that lost data: an existing group
// never loses messages it has not read without them counting as skipped (here: room pressure frees
// messages of a partition the group has not popped yet).
func TestExistingGroupNeverLosesUnreadMessagesSilently(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 3}))
	h.push("q", "p1", "a", "b")
	h.push("q", "p2", "c")
	h.ack("q", "audit", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "p2", Group: "audit"})...)
	h.ack("q", "widget", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "widget", Batch: 10})...)
	h.ack("q", "widget", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "widget", Batch: 10})...)
	_, err1 := h.pushErr("q", "p2", "d")
	_, err2 := h.pushErr("q", "p2", "e")
	read := h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "audit", Batch: 10})
	lost := int64(2 - len(read))
	skipped := groupDepth(t, h.depthOf("q", ""), "audit").Skipped
	if skipped != lost {
		t.Fatalf("audit read %q of a,b (pushes: %v, %v): %d lost but skipped=%d; unread messages were freed without being counted",
			payloadsOf(read), err1, err2, lost, skipped)
	}
}

// D4, D3: many idle groups are forgotten in one sweep, all at once, while a
// group still active stays: the forgotten ones stop pinning messages (the
// active one's position becomes the reclaim point) and give back their
// charges.
func TestManyIdleGroupsForgottenTogether(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.GroupIdle = 10 * time.Second })
	h.configure("q", declare(HasLeaseSeconds, Options{LeaseSeconds: 3600}))
	h.push("q", "", "a", "b", "c")
	before := h.e.CellBytes()
	for _, g := range numbered("idle", 500) {
		h.pop(PopRequest{Queue: "q", Group: g}) // each leases "a" and goes quiet
	}
	h.advance(5 * time.Second)
	h.ack("q", "live", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "live", Batch: 2})...)
	h.advance(6 * time.Second) // the 500 are idle past 10 s, "live" is not
	if qi := h.infoOf("q"); qi.Groups != 1 || qi.Depth != 1 {
		t.Fatalf("groups %d, depth %d; want only live left, and a and b reclaimable (depth 1)", qi.Groups, qi.Depth)
	}
	// What is left above the start is live's group, cursor and window.
	if got, most := h.e.CellBytes()-before, h.e.charge.ofGroup("live")+h.e.charge.cursor+8*h.e.charge.entry; got > most {
		t.Fatalf("%d bytes charged above the start after the idle groups went, want at most %d (live's)", got, most)
	}
}

// D3: the broker never refuses while reclaimable messages could make the
// room. A push to one partition of a queue at its bound, refusing with
// `reject`, frees the reclaimable messages of the queue's other partitions
// (reclaimQueue) before it would refuse: it is accepted and nothing is
// counted as dropped.
func TestRejectingQueueFreesOtherPartitionsReclaimableFirst(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 2, Policy: PolicyReject}))
	h.push("q", "a", "a0", "a1")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "a", Group: "g", Batch: 2})...)
	if n, err := h.pushErr("q", "b", "b0", "b1"); err != nil || n != 2 {
		t.Fatalf("push to partition b with partition a's two messages reclaimable: %d, %v; want 2 accepted", n, err)
	}
	if qi := h.infoOf("q"); qi.Depth != 2 || qi.Drops != (Drops{}) {
		t.Fatalf("depth %d drops %+v, want 2 and none (reclaim is not a drop)", qi.Depth, qi.Drops)
	}
	// Now nothing is reclaimable: the bound refuses.
	if _, err := h.pushErr("q", "a", "a2"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("push past the bound with nothing reclaimable: %v, want ErrQueueFull", err)
	}
}

// D3: messages dropped before any group exists leave the reclaim point at
// the head, not below it: the first group starts there, holds the point,
// and its first ack makes what it settled reclaimable (depth 2 → 1). A
// point left below the head made the new cursor not count as its holder,
// so no ack ever moved it.
func TestDropBeforeAnyGroupThenAckMovesTheReclaimPoint(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 2, Policy: PolicyDropOldest}))
	h.push("q", "", "m0", "m1", "m2") // m0 dropped for bounds, no group yet
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	if payloadsOf(ms) != "m1,m2" {
		t.Fatalf("popped %q, want m1,m2", payloadsOf(ms))
	}
	h.ack("q", "g", AckCompleted, ms[0])
	if qi := h.infoOf("q"); qi.Depth != 1 {
		t.Fatalf("depth %d after acking m1 of m1,m2, want 1", qi.Depth)
	}
	h.ack("q", "g", AckCompleted, ms[1])
	if qi := h.infoOf("q"); qi.Depth != 0 {
		t.Fatalf("depth %d after acking both, want 0", qi.Depth)
	}
}

// D3: the sweep frees reclaimable messages once the footprint passes 7/8
// of the broker total, not at 7/8 exactly.
func TestSweepFreesReclaimableAboveSevenEighths(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{}) // declared: the sweep never collects it
	h.push("q", "p", "abc")
	h.pop(PopRequest{Queue: "q", Group: "g", AutoAck: true}) // reclaimable
	if pad := (7 - h.e.CellBytes()%7) % 7; pad > 0 {
		h.e.Charge(pad)
	}
	h.e.cfg.MaxBytes = h.e.CellBytes() / 7 * 8 // the footprint is 7/8 of it exactly
	h.e.Sweep(h.clk.Now())
	if b := h.infoOf("q").Bytes; b != 3 {
		t.Fatalf("at 7/8 of the total: queue bytes %d, want the reclaimable 3 kept", b)
	}
	h.e.Charge(1)
	h.e.Sweep(h.clk.Now())
	if b := h.infoOf("q").Bytes; b != 0 {
		t.Fatalf("past 7/8 of the total: queue bytes %d, want the reclaimable message freed", b)
	}
}

// consumeEmpties pushes n empty messages to q and consumes them all, so that
// they are reclaimable: they hold no payload byte, but their ring slots are
// charged (docs/engine.md, "What the budgets count").
func consumeEmpties(h *harness, tenant, q string, n int) {
	h.t.Helper()
	if got, err := h.e.Push(tenant, q, "p", make([][]byte, n)); got != n || err != nil {
		h.t.Fatalf("push of %d empty messages: n=%d err=%v", n, got, err)
	}
	c := &collector{}
	if got, _, err := h.e.Pop(&PopRequest{Tenant: tenant, Queue: q, Group: "g", Batch: n, AutoAck: true}, c); got != n || err != nil {
		h.t.Fatalf("pop: n=%d err=%v", got, err)
	}
}

// D3: the tenant allowance never refuses while freeing reclaimable messages
// could make the room, empty ones too: what they give back is their ring
// slots.
func TestTenantReclaimsConsumedEmptyMessagesBeforeRefusing(t *testing.T) {
	h := newHarness(t, nil)
	consumeEmpties(h, "default", "q1", 1000)
	h.e.SetTenantLimits("default", tenantFootprint(h.e, "default"), 0)
	if n, err := h.pushErr("q2", "", "y"); n != 1 || err != nil {
		t.Fatalf("push that the empty messages' slots make room for: n=%d err=%v, want admitted", n, err)
	}
	if d := h.infoOf("q1"); d.Depth != 0 || len(h.pop(PopRequest{Queue: "q1", Group: "late", Batch: 10})) != 0 {
		t.Fatalf("q1 still holds its empty messages")
	}
}

// D3: the broker never refuses while freeing reclaimable messages could make
// the room, empty ones too.
func TestBrokerReclaimsConsumedEmptyMessagesBeforeRefusing(t *testing.T) {
	probe := newHarness(t, nil) // the footprint the same steps reach
	consumeEmpties(probe, "a", "q", 1000)
	total := probe.e.CellBytes()
	h := newHarness(t, func(c *Config) { c.MaxBytes = total })
	consumeEmpties(h, "a", "q", 1000)
	if n, err := h.e.Push("b", "q", "", payloads("y")); n != 1 || err != nil {
		t.Fatalf("push that the empty messages' slots make room for: n=%d err=%v, want admitted", n, err)
	}
}

// D3: the sweep past 7/8 of the broker total frees reclaimable empty
// messages too, and so gives back their ring slots.
func TestSweepFreesReclaimableEmptyMessagesNearTheTotal(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{}) // declared: the sweep never collects it
	consumeEmpties(h, "default", "q", 1000)
	before := h.e.CellBytes()
	h.e.cfg.MaxBytes = before // past 7/8 of it
	h.e.Sweep(h.clk.Now())
	if d := h.depthOf("q", "late"); d.Pending != 0 || h.e.CellBytes() >= before {
		t.Fatalf("after the sweep: a new group sees %d messages, cell bytes %d (before %d); want 0 and fewer", d.Pending, h.e.CellBytes(), before)
	}
}
