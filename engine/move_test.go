package engine

import (
	"testing"
	"time"
)

// Ownership moves (D17, docs/engine.md "Ownership moves"): what the member
// that loses a queue drops, and how its ids answer afterwards.

// dropForMove drops queue for a move, failing the test on error.
func (h *harness) dropForMove(queue string) int64 {
	h.t.Helper()
	n, err := h.e.DropForMove("default", queue)
	if err != nil {
		h.t.Fatalf("DropForMove %s: %v", queue, err)
	}
	return n
}

// D17: after the drop, an ack of any id the queue minted answers stale on
// this member: leased, already acked, or delivered by an autoAck pop; for a
// declared queue (which stays) and an implicit one (which goes).
func TestDropForMoveMakesEveryOldIdStale(t *testing.T) {
	for _, declared := range []bool{true, false} {
		h := newHarness(t, nil)
		if declared {
			h.configure("q", OptionSet{})
		}
		h.push("q", "p", "a", "b", "c")
		h.push("q", "r", "x")
		leased := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
		acked := h.pop(PopRequest{Queue: "q", Partition: "r", Group: "g"})
		if got := outcomes(h.ack("q", "g", AckCompleted, acked...)); got != "[acked]" {
			t.Fatalf("declared=%v: ack before the move: %s", declared, got)
		}
		auto := h.pop(PopRequest{Queue: "q", Group: "auto", AutoAck: true, Batch: 10})
		if len(leased) != 2 || len(auto) != 4 {
			t.Fatalf("declared=%v: popped %d leased and %d auto", declared, len(leased), len(auto))
		}
		if n := h.dropForMove("q"); n != 4 {
			t.Fatalf("declared=%v: dropped %d, want 4 (every message held)", declared, n)
		}
		for _, ms := range [][]got{leased, acked, auto} {
			for _, st := range []AckStatus{AckCompleted, AckFailed} {
				if got := outcomes(h.ack("q", "g", st, ms...)); got != outcomes(stales(len(ms))) {
					t.Fatalf("declared=%v: ack (%v) after the move of %v: %s, want stale", declared, st, ms, got)
				}
			}
		}
		// Another group, queue mode: stale all the same (the id is what is stale).
		if got := outcomes(h.ack("q", "", AckCompleted, leased...)); got != "[stale stale]" {
			t.Fatalf("declared=%v: queue-mode ack after the move: %s", declared, got)
		}
	}
}

func stales(n int) []Outcome {
	out := make([]Outcome, n)
	for i := range out {
		out[i] = OutcomeStale
	}
	return out
}

// D17 + D6: ownership moves away and comes back, twice. The queue is dropped
// on each loss and starts empty on each regain; new messages in the same
// partitions get new ids; an id of any earlier ownership answers stale and
// never settles a newer message; the current ones ack.
func TestOwnershipThatComesBackAnswersStaleForEveryEarlierId(t *testing.T) {
	for _, declared := range []bool{true, false} {
		h := newHarness(t, nil)
		if declared {
			h.configure("q", declare(HasMaxLength, Options{MaxLength: 77}))
		}
		var eras [][]got
		seen := map[string]bool{}
		for era := 0; era < 3; era++ {
			if era > 0 {
				h.dropForMove("q") // lost
				if declared != h.listed("q") {
					t.Fatalf("declared=%v era %d: listed %v after the loss", declared, era, h.listed("q"))
				}
				// While another member owns it, an old id acked here is stale.
				if got := outcomes(h.ack("q", "g", AckCompleted, eras[era-1]...)); got != "[stale stale]" {
					t.Fatalf("declared=%v era %d: ack while away: %s", declared, era, got)
				}
			}
			// (Re)gained: the same partition, new messages.
			h.push("q", "p", "m1", "m2")
			ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
			if len(ms) != 2 || ms[0].Attempts != 0 || payloadsOf(ms) != "m1,m2" {
				t.Fatalf("declared=%v era %d: popped %+v", declared, era, ms)
			}
			for _, m := range ms {
				if seen[m.ID] {
					t.Fatalf("declared=%v era %d: id %s reused", declared, era, m.ID)
				}
				seen[m.ID] = true
			}
			for _, old := range eras {
				if got := outcomes(h.ack("q", "g", AckCompleted, old...)); got != "[stale stale]" {
					t.Fatalf("declared=%v era %d: ack of an earlier era's ids: %s", declared, era, got)
				}
			}
			// The stale acks settled nothing: the lease is whole.
			if d := h.depthOf("q", "g"); d.Pending != 2 {
				t.Fatalf("declared=%v era %d: pending %d after stale acks, want 2", declared, era, d.Pending)
			}
			eras = append(eras, ms)
		}
		last := eras[len(eras)-1]
		if got := outcomes(h.ack("q", "g", AckCompleted, last...)); got != "[acked acked]" {
			t.Fatalf("declared=%v: ack of the current ids: %s", declared, got)
		}
		if declared && h.infoOf("q").Options.MaxLength != 77 {
			t.Fatalf("declaration lost over the moves: %+v", h.infoOf("q").Options)
		}
	}
}

// D17: the old owner answers the queue's parked pops with an empty batch,
// those that named a partition and those that did not, in every group.
func TestDropForMoveAnswersParkedPopsEmpty(t *testing.T) {
	for _, declared := range []bool{true, false} {
		h := newHarness(t, nil)
		if declared {
			h.configure("q", OptionSet{})
		}
		h.push("q", "p", "a")
		h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"}) // leased: g parks
		byPart, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g"})
		wildcard, _ := h.park(PopRequest{Queue: "q", Group: "g"})
		other, _ := h.park(PopRequest{Queue: "q", Group: "h", Partition: "never"})
		before := h.e.CellBytes()
		h.dropForMove("q")
		for name, c := range map[string]*collector{"partition": byPart, "wildcard": wildcard, "other group": other} {
			if !c.isDone() || c.completed != 0 || len(c.msgs) != 0 {
				t.Fatalf("declared=%v: %s pop: done=%v n=%d msgs=%d, want answered empty", declared, name, c.isDone(), c.completed, len(c.msgs))
			}
		}
		if before <= h.e.CellBytes() {
			t.Fatalf("declared=%v: footprint %d -> %d: the parked pops' charges were not given back", declared, before, h.e.CellBytes())
		}
		// Time passing does not complete them again.
		h.advance(2 * time.Minute)
		if byPart.completed != 0 || wildcard.completed != 0 {
			t.Fatal("completed twice")
		}
	}
}

// D17: a declared queue stays declared and empty: no messages, partitions,
// groups or drop counters, its declaration whole, its footprint what a fresh
// declaration costs. An implicit one goes, charges and queue count with it.
func TestDropForMoveKeepsOnlyTheDeclaration(t *testing.T) {
	h := newHarness(t, nil)
	set := declare(HasMaxLength|HasPolicy|HasLeaseSeconds|HasTTLSeconds,
		Options{MaxLength: 2, Policy: PolicyDropOldest, LeaseSeconds: 7, TTLSeconds: 60})
	base := h.e.CellBytes()
	h.configure("d", set)
	declaredCost := h.e.CellBytes()
	want := h.infoOf("d").Options
	h.push("d", "p", "1", "2", "3") // one bounds drop
	h.push("d", "r", "4")           // and one more (maxLength 2 over the queue)
	h.pop(PopRequest{Queue: "d", Group: "g", Batch: 1})
	h.pop(PopRequest{Queue: "d", Group: "h", AutoAck: true, Batch: 10})
	h.push("i", "p", "x")
	h.pop(PopRequest{Queue: "i", Group: "g"})
	if qi := h.infoOf("d"); qi.Drops.Bounds != 2 || qi.Groups != 2 || qi.Partitions != 2 {
		t.Fatalf("before the move: %+v", qi)
	}

	if n := h.dropForMove("d"); n != 2 {
		t.Fatalf("dropped %d from d, want 2", n)
	}
	qi := h.infoOf("d")
	if !qi.Declared || qi.Depth != 0 || qi.Bytes != 0 || qi.Partitions != 0 || qi.Groups != 0 ||
		qi.Drops != (Drops{}) || qi.Options != want {
		t.Fatalf("declared queue after the move: %+v, want declared and empty with %+v", qi, want)
	}
	if d := h.depthOf("d", "g"); d.Pending != 0 || len(d.Partitions) != 0 {
		t.Fatalf("depth after the move %+v", d)
	}
	if n := h.dropForMove("i"); n != 1 {
		t.Fatalf("dropped %d from i, want 1", n)
	}
	if h.listed("i") || h.e.QueueCount("default") != 1 {
		t.Fatalf("implicit queue listed=%v, queue count %d; want it gone", h.listed("i"), h.e.QueueCount("default"))
	}
	if got := h.e.CellBytes(); got != declaredCost {
		t.Fatalf("footprint %d after the moves; a fresh declaration costs %d (empty engine %d)", got, declaredCost, base)
	}
	// The lease timers, ttl timer and dropped messages do nothing later.
	h.advance(2 * time.Minute)
	if qi := h.infoOf("d"); qi.Drops != (Drops{}) || qi.Depth != 0 {
		t.Fatalf("after time passed: %+v", qi)
	}
	// The declaration is enforced on the fresh instance.
	h.push("d", "p", "a", "b", "c")
	if qi := h.infoOf("d"); qi.Depth != 2 || qi.Drops.Bounds != 1 {
		t.Fatalf("declaration not in force after the move: %+v", qi)
	}
	// A missing queue, a bad name.
	if n, err := h.e.DropForMove("default", "missing"); n != 0 || err != nil || h.listed("missing") {
		t.Fatalf("missing queue: %d %v", n, err)
	}
	if _, err := h.e.DropForMove("default", ""); err == nil {
		t.Fatal("empty name accepted")
	}
}

// D17: the move of one queue does not touch another's ids: a live lease
// elsewhere still acks, even one below the seqs the moved queue issued.
func TestDropForMoveLeavesOtherQueuesAlone(t *testing.T) {
	h := newHarness(t, nil)
	h.push("kept", "p", "k")
	kept := h.pop(PopRequest{Queue: "kept", Group: "g"}) // seq 0
	h.push("moved", "p", numbered("m", 50)...)           // seqs up to 49
	h.pop(PopRequest{Queue: "moved", Group: "g", Batch: 50})
	h.dropForMove("moved")
	if got := outcomes(h.ack("kept", "g", AckCompleted, kept...)); got != "[acked]" {
		t.Fatalf("ack on a queue that did not move: %s", got)
	}
	// A queue created after the move, whatever its name, mints ids that ack.
	h.push("late", "p", "l")
	late := h.pop(PopRequest{Queue: "late", Group: "g"})
	if got := outcomes(h.ack("late", "g", AckCompleted, late...)); got != "[acked]" {
		t.Fatalf("ack on a queue made after the move: %s", got)
	}
}

// A declared queue this member never owned (no partition, group or parked
// pop) holds nothing and minted nothing: the move leaves it as it is.
func TestDropForMoveOfAPristineQueueChangesNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("d", OptionSet{})
	before := h.e.lookup("default", "d")
	if n := h.dropForMove("d"); n != 0 || h.e.lookup("default", "d") != before || h.e.moveFloor.Load() != 0 {
		t.Fatalf("a pristine queue was replaced (dropped %d, floor %d)", n, h.e.moveFloor.Load())
	}
}

// Without a move, nothing answers stale that did not before: reset, delete
// and collection keep answering unknown (D2), and so does an id of ours for
// a queue that was never here (the conformance suite's "ghost" queue).
func TestWithoutAMoveOldIdsStayUnknown(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a")
	ms := h.pop(PopRequest{Queue: "q", Group: "g"})
	h.e.Reset("default", "q")
	if got := outcomes(h.ack("q", "g", AckCompleted, ms...)); got != "[unknown]" {
		t.Fatalf("after reset: %s", got)
	}
	h.e.Delete("default", "q")
	if got := outcomes(h.ack("q", "g", AckCompleted, ms...)); got != "[unknown]" {
		t.Fatalf("after delete: %s", got)
	}
	if got := outcomes(h.ackIDs("ghost", "g", AckCompleted, "e:abcdef123456:Default:0")); got != "[unknown]" {
		t.Fatalf("ghost queue: %s", got)
	}
}

// After a move, an id of ours acked on a queue that is not here answers
// stale when its seq is below what any moved queue issued (it may have been
// minted by one), unknown above (no moved queue minted it).
func TestAckOnAMissingQueueAfterAMove(t *testing.T) {
	h := newHarness(t, nil)
	h.push("moved", "p", numbered("m", 10)...)
	h.dropForMove("moved")
	if got := outcomes(h.ackIDs("ghost", "g", AckCompleted,
		"e:abcdef123456:Default:0", "e:abcdef123456:p:9", "e:abcdef123456:p:10")); got != "[stale stale unknown]" {
		t.Fatalf("acks on a missing queue after a move: %s", got)
	}
}

// P3: acking ids a move made stale allocates nothing, for a queue that is
// here (declared, replaced) and one that is not (implicit, gone).
func TestAckOfStaleIdsIsAllocationFree(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("d", OptionSet{})
	items := map[string][]AckItem{}
	for _, q := range []string{"d", "i"} {
		h.push(q, "p", numbered("m", 10)...)
		for _, m := range h.pop(PopRequest{Queue: q, Group: "g", Batch: 10}) {
			items[q] = append(items[q], AckItem{ID: []byte(m.ID)})
		}
		h.dropForMove(q)
	}
	out := make([]Outcome, 0, 10)
	for _, q := range []string{"d", "i"} {
		ack := func() { out, _ = h.e.Ack("default", q, "g", items[q], out[:0]) }
		ack()
		if outcomes(out) != outcomes(stales(10)) {
			t.Fatalf("%s: %v", q, out)
		}
		if allocs := testing.AllocsPerRun(50, ack); allocs != 0 {
			t.Fatalf("%s: an ack of 10 stale ids allocates %.1f times", q, allocs)
		}
	}
}
