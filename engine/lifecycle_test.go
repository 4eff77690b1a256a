package engine

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// D8: an implicit queue is collected after QUEEN_EPHEMERAL_IMPLICIT_IDLE_S (300 s) empty and unpolled.
func TestImplicitQueueCollectedAfterIdle(t *testing.T) {
	h := newHarness(t, nil)
	h.pop(PopRequest{Queue: "inbox", Group: "g"})
	h.advance(299 * time.Second)
	if !h.listed("inbox") {
		t.Fatal("collected before 300 s")
	}
	h.advance(time.Second)
	if h.listed("inbox") {
		t.Fatal("an idle empty implicit queue was not collected at 300 s")
	}
	var d DepthInfo
	if err := h.e.Depth("default", "inbox", "", &d); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("depth of a collected queue: %v", err)
	}
}

// D8: with nothing pending (consumed messages only) an implicit queue is collectable, and its bytes go.
func TestImplicitQueueHoldingOnlyConsumedMessagesIsCollected(t *testing.T) {
	h := newHarness(t, nil)
	h.push("inbox", "", "reply")
	h.ack("inbox", "g", AckCompleted, h.pop(PopRequest{Queue: "inbox", Group: "g"})...)
	h.advance(300 * time.Second)
	if h.listed("inbox") || h.e.CellBytes() != 0 {
		t.Fatalf("listed=%v cell bytes=%d, want collected and freed", h.listed("inbox"), h.e.CellBytes())
	}
}

// D8: an abandoned inbox holding an unread reply is not empty, so it is not collected.
func TestImplicitQueueNotCollectedWhilePending(t *testing.T) {
	h := newHarness(t, nil)
	h.push("inbox", "", "unread reply")
	h.advance(time.Hour)
	if qi := h.infoOf("inbox"); qi.Depth != 1 {
		t.Fatalf("depth %d", qi.Depth)
	}
}

// D8: an implicit queue with a parked waiter is not collected.
func TestImplicitQueueNotCollectedWhileParked(t *testing.T) {
	h := newHarness(t, nil)
	c, _ := h.park(PopRequest{Queue: "inbox", Timeout: 20 * time.Minute})
	h.advance(10 * time.Minute)
	if !h.listed("inbox") {
		t.Fatal("collected while a pop was parked on it")
	}
	h.push("inbox", "", "reply")
	if !c.done || payloadsOf(c.msgs) != "reply" {
		t.Fatalf("the parked pop: done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D8: once the parked pop is gone (cancelled), the queue is collectable again after the idle time.
func TestImplicitQueueCollectedAfterParkedPopCancelled(t *testing.T) {
	h := newHarness(t, nil)
	_, parked := h.park(PopRequest{Queue: "inbox", Timeout: time.Hour})
	h.advance(10 * time.Second)
	h.e.Cancel(parked)
	h.advance(300 * time.Second)
	if h.listed("inbox") {
		t.Fatal("not collected 300 s after its parked pop was cancelled")
	}
}

// D8: a push or a pop keeps an implicit queue alive; the idle time counts from the last one.
func TestPushAndPopKeepImplicitQueueAlive(t *testing.T) {
	h := newHarness(t, nil)
	h.pop(PopRequest{Queue: "inbox", Group: "g"})
	h.advance(200 * time.Second)
	h.push("inbox", "", "x")
	h.advance(50 * time.Second)
	h.ack("inbox", "g", AckCompleted, h.pop(PopRequest{Queue: "inbox", Group: "g"})...)
	h.advance(299 * time.Second)
	if !h.listed("inbox") {
		t.Fatal("collected 299 s after its last pop")
	}
	h.advance(time.Second)
	if h.listed("inbox") {
		t.Fatal("not collected 300 s after its last pop")
	}
}

// spec (two tiers): declared queues are never collected.
func TestDeclaredQueueIsNeverCollected(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{})
	h.advance(24 * time.Hour)
	if qi := h.infoOf("q"); !qi.Declared {
		t.Fatalf("%+v", qi)
	}
}

// spec (two tiers): a collected implicit queue is re-created by the next push or pop as a new, empty queue with the defaults.
func TestCollectedQueueComesBackNewAndEmpty(t *testing.T) {
	h := newHarness(t, nil)
	h.push("inbox", "", "a")
	h.ack("inbox", "g", AckCompleted, h.pop(PopRequest{Queue: "inbox", Group: "g"})...)
	h.advance(300 * time.Second)
	if h.listed("inbox") {
		t.Fatal("not collected")
	}
	h.pop(PopRequest{Queue: "inbox", Partition: "Default", Group: "other"})
	qi := h.infoOf("inbox")
	if qi.Declared || qi.Depth != 0 || qi.Bytes != 0 || qi.Groups != 1 || qi.Options.MaxLength != 10000 {
		t.Fatalf("re-created queue %+v", qi)
	}
}

// D6: an id is never reused within an incarnation, not after reset.
func TestIdsAreNeverReusedAfterReset(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	before := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	if _, err := h.e.Reset("default", "q"); err != nil {
		t.Fatal(err)
	}
	h.push("q", "p", "c")
	after := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	if len(after) != 1 || after[0].ID == before[0].ID || after[0].ID == before[1].ID || after[0].ID != "e:abcdef123456:p:2" {
		t.Fatalf("ids before %s,%s; after reset %+v", before[0].ID, before[1].ID, after)
	}
}

// D6: an id is never reused within an incarnation, not after a queue is deleted and created again.
func TestIdsAreNeverReusedAfterDeleteAndRecreate(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	before := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 3})
	h.e.Delete("default", "q")
	h.push("q", "p", "x")
	after := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	for _, b := range before {
		if after[0].ID == b.ID {
			t.Fatalf("id %s reused after delete", b.ID)
		}
	}
	// The old ids must not settle the new message.
	if got := outcomes(h.ack("q", "g", AckCompleted, before...)); got != "[unknown unknown unknown]" {
		t.Fatalf("old ids after re-creation: %s", got)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, after...)); got != "[acked]" {
		t.Fatalf("new id: %s", got)
	}
}

// D6: an id is never reused after an implicit queue is collected and created again.
func TestIdsAreNeverReusedAfterImplicitCollection(t *testing.T) {
	h := newHarness(t, nil)
	h.push("inbox", "", "a")
	before := h.pop(PopRequest{Queue: "inbox", Group: "g", AutoAck: true})
	h.advance(300 * time.Second)
	if h.listed("inbox") {
		t.Fatal("not collected")
	}
	h.push("inbox", "", "b")
	after := h.pop(PopRequest{Queue: "inbox", Group: "g"})
	if after[0].ID == before[0].ID {
		t.Fatalf("id %s reused after collection", after[0].ID)
	}
}

// D6: the incarnation is random per process start, at least 48 bits, hex, and is part of every id.
func TestIncarnationIsRandomPerEngine(t *testing.T) {
	a, b := New(Config{Clock: NewManualClock()}), New(Config{Clock: NewManualClock()})
	defer a.Close()
	defer b.Close()
	ia, ib := a.Incarnation(), b.Incarnation()
	if ia == ib || len(ia) < 12 || len(ib) < 12 || strings.Trim(ia, "0123456789abcdef") != "" {
		t.Fatalf("incarnations %q and %q", ia, ib)
	}
	if id := string(a.AppendID(nil, "p", 7)); id != "e:"+ia+":p:7" {
		t.Fatalf("id %s", id)
	}
}

// spec (reset): every message dropped (and reported), the declaration stays; reset drops are not counted under a cause.
func TestResetDropsEveryMessageAndKeepsDeclaration(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 50, Policy: PolicyDropOldest}))
	h.push("q", "p1", "a", "b", "c")
	h.push("q", "p2", "d", "e")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g"})...) // a is reclaimable
	dropped, err := h.e.Reset("default", "q")
	if err != nil || dropped != 5 {
		t.Fatalf("reset dropped %d (%v), want 5: every message held", dropped, err)
	}
	qi := h.infoOf("q")
	if !qi.Declared || qi.Options.MaxLength != 50 || qi.Options.Policy != PolicyDropOldest {
		t.Fatalf("declaration after reset %+v", qi)
	}
	if qi.Depth != 0 || qi.Bytes != 0 || qi.Drops != (Drops{}) || h.e.CellBytes() != 0 {
		t.Fatalf("after reset depth=%d bytes=%d drops=%+v cell=%d", qi.Depth, qi.Bytes, qi.Drops, h.e.CellBytes())
	}
	if qi.Groups != 1 {
		t.Fatalf("groups %d after reset, want the group kept", qi.Groups)
	}
}

// spec (reset): an implicit queue stays implicit after reset; reset of nothing reports dropped 0.
func TestResetOfImplicitAndMissingQueues(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a")
	if n, _ := h.e.Reset("default", "q"); n != 1 || h.infoOf("q").Declared {
		t.Fatalf("reset of implicit: dropped %d declared %v", n, h.infoOf("q").Declared)
	}
	if n, err := h.e.Reset("default", "missing"); n != 0 || err != nil || h.listed("missing") {
		t.Fatalf("reset of missing: dropped %d err %v listed %v", n, err, h.listed("missing"))
	}
}

// spec (reset): every lease voided, every group cursor rewound; reset adds no skips.
func TestResetVoidsLeasesAndRewindsCursors(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	leased := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g2", AutoAck: true})
	h.e.Reset("default", "q")
	if got := outcomes(h.ack("q", "g", AckCompleted, leased...)); got != "[unknown]" {
		t.Fatalf("ack of a pre-reset lease: %s, want unknown", got)
	}
	h.push("q", "p", "d", "e")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})); got != "d,e" {
		t.Fatalf("g after reset got %q, want d,e at once", got)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g2", Batch: 10})); got != "d,e" {
		t.Fatalf("g2 after reset got %q", got)
	}
	d := h.depthOf("q", "")
	for _, gd := range d.Groups {
		if gd.Skipped != 0 {
			t.Fatalf("reset added skips: %+v", d.Groups)
		}
	}
}

// spec (delete): answers whether there was a queue; removes contents, cursors and declaration.
func TestDeleteAnswersExistedAndRemovesEverything(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 7}))
	h.push("q", "p", "a")
	h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	if existed, err := h.e.Delete("default", "q"); !existed || err != nil {
		t.Fatalf("delete: %v %v", existed, err)
	}
	if h.listed("q") || h.e.CellBytes() != 0 {
		t.Fatalf("after delete listed=%v cell=%d", h.listed("q"), h.e.CellBytes())
	}
	if existed, err := h.e.Delete("default", "q"); existed || err != nil {
		t.Fatalf("second delete: %v %v, want false", existed, err)
	}
	if existed, _ := h.e.Delete("default", "never"); existed {
		t.Fatal("delete of a queue that never existed answered true")
	}
	h.push("q", "p", "b")
	qi := h.infoOf("q")
	if qi.Declared || qi.Options.MaxLength != 10000 || qi.Groups != 0 || qi.Depth != 1 {
		t.Fatalf("re-created after delete %+v, want implicit, defaults, no groups", qi)
	}
}

// spec (delete): an implicit queue is deleted too.
func TestDeleteOfImplicitQueue(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a")
	if existed, _ := h.e.Delete("default", "q"); !existed || h.listed("q") {
		t.Fatalf("delete of implicit: %v", existed)
	}
}

// spec (what survives): drop counters are contents; a fresh engine (a restart) starts at zero.
func TestDropCountersStartAtZero(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []Cause{CauseBounds, CauseTTL, CauseRetry} {
		if h.e.Drops(c) != 0 {
			t.Fatalf("%v drops %d at start", c, h.e.Drops(c))
		}
	}
}

// engine.md (empty inboxes under memory pressure): past 3/4 of the broker
// total, empty implicit queues quiet for a second are collected without
// waiting for ImplicitIdle; below it, and for a queue that holds a message,
// has a parked pop or is declared, nothing changes.
func TestEmptyInboxesCollectedEarlyUnderBrokerPressure(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("declared", OptionSet{})
	h.push("unread", "", "reply")
	h.park(PopRequest{Queue: "waiting", Timeout: time.Hour})
	for i := range 100 {
		q := "inbox-" + strconv.Itoa(i)
		h.push(q, "", "reply")
		h.pop(PopRequest{Queue: q, AutoAck: true})
	}
	h.advance(2 * time.Second)
	if n := len(h.e.Queues("default", nil)); n != 103 {
		t.Fatalf("%d queues below the pressure mark, want all 103 kept", n)
	}
	h.e.cfg.MaxBytes = h.e.CellBytes() * 5 / 4 // the footprint is now 4/5 of it
	h.advance(h.e.cfg.SweepEvery)
	var left []string
	for _, q := range h.e.Queues("default", nil) {
		left = append(left, q.Name)
	}
	if strings.Join(left, ",") != "declared,unread,waiting" {
		t.Fatalf("under pressure the queues left are %v, want declared, unread and waiting", left)
	}
	// A queue quiet for less than a second stays.
	h.push("fresh", "", "x")
	h.pop(PopRequest{Queue: "fresh", AutoAck: true})
	h.e.cfg.MaxBytes = h.e.CellBytes() * 5 / 4
	h.advance(h.e.cfg.SweepEvery / 2)
	h.e.Sweep(h.e.nowNanos())
	if !h.listed("fresh") {
		t.Fatal("an inbox quiet for half a second was collected")
	}
}

// engine.md (empty inboxes under memory pressure): a tenant past 3/4 of its
// own allowance has its empty inboxes collected early; another tenant's stay.
func TestEmptyInboxesCollectedEarlyUnderTenantPressure(t *testing.T) {
	h := newHarness(t, nil)
	for _, tenant := range []string{"a", "b"} {
		if _, err := h.e.Push(tenant, "inbox", "", [][]byte{[]byte("1")}); err != nil {
			t.Fatal(err)
		}
		var c collector
		if _, _, err := h.e.Pop(&PopRequest{Tenant: tenant, Queue: "inbox", AutoAck: true}, &c); err != nil {
			t.Fatal(err)
		}
	}
	h.e.SetTenantLimits("a", tenantFootprint(h.e, "a")*5/4, 0)
	h.advance(2 * time.Second)
	if len(h.e.Queues("a", nil)) != 0 || len(h.e.Queues("b", nil)) != 1 {
		t.Fatalf("queues of a: %d, of b: %d; want a's inbox collected, b's kept", len(h.e.Queues("a", nil)), len(h.e.Queues("b", nil)))
	}
}

// The sweeper's due index (engine/sweepindex.go) holds every live queue
// once and no queue that went: after churn (queues created, deleted,
// collected, touched again) it files exactly the live queues.
func TestDueIndexFilesExactlyTheLiveQueues(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("declared", OptionSet{})
	for i := range 300 {
		q := "q-" + strconv.Itoa(i)
		h.push(q, "", "x")
		h.pop(PopRequest{Queue: q, Group: "g", AutoAck: true})
		if i%3 == 0 {
			if _, err := h.e.Delete("default", q); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, live := h.e.sweep.index.filed(), len(h.e.Queues("default", nil)); n != live || live != 201 {
		t.Fatalf("after the deletes the due index files %d queues, %d are live (want 201)", n, live)
	}
	h.advance(100 * time.Second)
	for i := 1; i < 300; i += 3 {
		h.push("q-"+strconv.Itoa(i), "", "keeps it alive") // pending: never collected
	}
	h.advance(250 * time.Second) // the untouched ones are collected
	live := len(h.e.Queues("default", nil))
	if live != 1+100 {
		t.Fatalf("%d queues live, want the declared one and the 100 with a pending message", live)
	}
	if n := h.e.sweep.index.filed(); n != live {
		t.Fatalf("the due index files %d queues, %d are live", n, live)
	}
	// An ownership move replaces a declared queue by a fresh instance
	// (engine/move.go): the old one leaves the index, the new one is filed.
	h.push("declared", "", "x")
	h.pop(PopRequest{Queue: "declared", Group: "g"})
	if _, err := h.e.DropForMove("default", "declared"); err != nil {
		t.Fatal(err)
	}
	if n, live := h.e.sweep.index.filed(), len(h.e.Queues("default", nil)); n != live {
		t.Fatalf("after a move the due index files %d queues, %d are live", n, live)
	}
}

// engine.md (empty inboxes under memory pressure): pressure starts past 3/4
// of the broker total, not at 3/4 exactly.
func TestPressureStartsPastThreeQuarters(t *testing.T) {
	h := newHarness(t, nil)
	h.push("inbox", "", "reply")
	h.pop(PopRequest{Queue: "inbox", AutoAck: true})
	h.advance(2 * time.Second) // quiet for longer than spareIdle
	if pad := (3 - h.e.CellBytes()%3) % 3; pad > 0 {
		h.e.Charge(pad)
	}
	h.e.cfg.MaxBytes = h.e.CellBytes() / 3 * 4 // the footprint is 3/4 of it exactly
	h.e.Sweep(h.e.nowNanos())
	if !h.listed("inbox") {
		t.Fatal("an empty inbox was collected at 3/4 of the total exactly")
	}
	h.e.Charge(1)
	h.e.Sweep(h.e.nowNanos())
	if h.listed("inbox") {
		t.Fatal("an empty inbox quiet for 2 s was kept past 3/4 of the total")
	}
}

// D8, D4: a queue or a group that was active since it was filed is looked at
// again when its own idle time ends, not a whole idle time after the visit.
func TestCollectionFollowsTheLastActivity(t *testing.T) {
	h := newHarness(t, nil)
	h.push("inbox", "", "reply")
	h.pop(PopRequest{Queue: "inbox", AutoAck: true})
	h.configure("declared", OptionSet{})
	h.push("declared", "", "x")
	h.pop(PopRequest{Queue: "declared", Group: "g", AutoAck: true})
	h.advance(100 * time.Second)
	h.pop(PopRequest{Queue: "inbox", AutoAck: true})                // activity at 100 s
	h.pop(PopRequest{Queue: "declared", Group: "g", AutoAck: true}) // and for g
	h.advance(201 * time.Second)                                    // the visit at 300 s finds both active
	if !h.listed("inbox") || h.infoOf("declared").Groups != 1 {
		t.Fatal("collected before 300 s of idleness")
	}
	h.advance(101 * time.Second) // 402 s: idle for 302 s
	if h.listed("inbox") {
		t.Fatal("the inbox idle for 302 s was not collected")
	}
	if n := h.infoOf("declared").Groups; n != 0 {
		t.Fatalf("%d groups, want g idle for 302 s forgotten", n)
	}
}

// engine.md (empty inboxes under memory pressure): the sweep runs every
// SweepEvery, so an inbox quiet for spareIdle under pressure goes at the
// first sweep after that, not before.
func TestSweepRunsEverySweepEvery(t *testing.T) {
	h := newHarness(t, nil)
	h.advance(500 * time.Millisecond)
	h.push("inbox", "", "reply")
	h.pop(PopRequest{Queue: "inbox", AutoAck: true}) // quiet from 0.5 s
	h.e.cfg.MaxBytes = h.e.CellBytes() * 5 / 4       // under pressure
	for i := 0; i < 140; i++ {
		h.advance(10 * time.Millisecond) // 1.9 s: swept at 1 s only
	}
	if !h.listed("inbox") {
		t.Fatal("the inbox was collected before the sweep at 2 s")
	}
	h.advance(100 * time.Millisecond)
	if h.listed("inbox") {
		t.Fatal("the inbox quiet for 1.5 s was not collected by the sweep at 2 s")
	}
}

// engine.md (empty inboxes under memory pressure): once pressure began,
// the due index collects the inboxes made after it without another walk,
// and the early collection lasts for spareHold after the footprint fell
// below the mark; then D8's idle time applies again.
func TestEarlyCollectionHoldsAfterThePressure(t *testing.T) {
	h := newHarness(t, nil)
	inbox := func(name string) {
		h.push(name, "", "reply")
		h.pop(PopRequest{Queue: name, AutoAck: true})
	}
	inbox("first")
	h.e.cfg.MaxBytes = h.e.CellBytes() * 5 / 4 // under pressure
	h.advance(2 * time.Second)                 // quiet for 2 s: collected
	if h.listed("first") {
		t.Fatal("an inbox quiet for 2 s under pressure was kept")
	}
	h.e.cfg.MaxBytes = 1 << 40 // far below the mark from now on
	for i := range 3 {
		name := "after-" + strconv.Itoa(i)
		inbox(name)
		h.advance(2*time.Second + h.e.cfg.SweepEvery)
		if h.listed(name) {
			t.Fatalf("inbox %s, made %d s after the pressure ended, was kept past 2 s", name, 2+3*i)
		}
	}
	h.advance(time.Duration(spareHold)) // a minute below the mark: D8 again
	inbox("later")
	h.advance(5 * time.Second)
	if !h.listed("later") {
		t.Fatal("an inbox quiet for 5 s was collected a minute after the pressure ended")
	}
}

// D8: an implicit queue without groups pushed to since it was filed (its
// messages gone by ttl) is collected when its own idle time ends.
func TestCollectionFollowsTheLastPush(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Defaults.TTLSeconds = 1 })
	h.push("inbox", "", "a")
	h.advance(100 * time.Second)
	h.push("inbox", "", "b") // activity at 100 s; b outlives its ttl at 101 s
	h.advance(201 * time.Second)
	if !h.listed("inbox") {
		t.Fatal("collected 201 s after its last push")
	}
	h.advance(101 * time.Second)
	if h.listed("inbox") {
		t.Fatal("the inbox idle for 302 s was not collected")
	}
}
