package engine

import (
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// spec (pop): batch takes up to that many, oldest first; the rest waits its turn.
func TestPopReturnsUpToBatchInOrder(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "m0", "m1", "m2", "m3", "m4")
	first := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 3})
	if got := payloadsOf(first); got != "m0,m1,m2" {
		t.Fatalf("first batch %q", got)
	}
	h.ack("q", "g", AckCompleted, first...)
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 3})); got != "m3,m4" {
		t.Fatalf("second batch %q", got)
	}
}

// spec (pop): batch defaults to 1.
func TestPopBatchDefaultsToOne(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", AutoAck: true})); got != "a" {
		t.Fatalf("default batch delivered %q, want one message", got)
	}
}

// spec (pop) / D11: batch is clamped to 10,000.
func TestPopBatchIsClampedTo10000(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 20000}))
	h.push("q", "", numbered("a", MaxBatch)...)
	h.push("q", "", numbered("b", 5)...)
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 20000, AutoAck: true})
	if len(ms) != MaxBatch || ms[MaxBatch-1].Payload != "a9999" {
		t.Fatalf("batch of 20,000 delivered %d, want 10,000", len(ms))
	}
}

// spec (consumption semantics): a pop with no group is queue mode, one shared cursor, shown as __QUEUE_MODE__.
func TestPopWithoutGroupIsQueueModeOneSharedCursor(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b", "c")
	a := h.pop(PopRequest{Queue: "q"})
	if got := payloadsOf(a); got != "a" {
		t.Fatalf("first queue-mode pop %q", got)
	}
	if got := outcomes(h.ack("q", "", AckCompleted, a...)); got != "[acked]" {
		t.Fatalf("ack without group: %s", got)
	}
	b := h.pop(PopRequest{Queue: "q"}) // another consumer, same shared cursor
	if got := payloadsOf(b); got != "b" {
		t.Fatalf("second queue-mode pop %q, want b", got)
	}
	if got := outcomes(h.ack("q", QueueModeGroup, AckCompleted, b...)); got != "[acked]" {
		t.Fatalf("ack naming __QUEUE_MODE__: %s", got)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: QueueModeGroup})); got != "c" {
		t.Fatalf("pop naming __QUEUE_MODE__ %q, want c from the same cursor", got)
	}
	d := h.depthOf("q", "")
	if len(d.Groups) != 1 || d.Groups[0].Group != QueueModeGroup || h.infoOf("q").Groups != 1 {
		t.Fatalf("groups %+v, want only __QUEUE_MODE__", d.Groups)
	}
}

// spec (consumption semantics): competing consumers pop with the same group and share the messages.
func TestCompetingConsumersWithSameGroupShareMessages(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "a1", "a2")
	h.push("q", "p2", "b1", "b2")
	c1 := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	c2 := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	c3 := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	if len(c1) != 2 || len(c2) != 2 || len(c3) != 0 {
		t.Fatalf("consumers got %d, %d, %d; want 2, 2, 0", len(c1), len(c2), len(c3))
	}
	all := []string{}
	for _, m := range append(c1, c2...) {
		all = append(all, m.Payload)
	}
	sort.Strings(all)
	if strings.Join(all, ",") != "a1,a2,b1,b2" {
		t.Fatalf("together they got %v, want each message exactly once", all)
	}
	h.ack("q", "g", AckCompleted, c1...)
	h.ack("q", "g", AckCompleted, c2...)
	if ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10}); len(ms) != 0 {
		t.Fatalf("after all acks the group got %q again", payloadsOf(ms))
	}
}

// spec (consumption semantics): fan-out: every subscriber pops with its own group and receives everything.
func TestFanOutEachGroupReceivesEverything(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	var ids string
	for i, g := range []string{"g1", "g2", "g3"} {
		ms := h.pop(PopRequest{Queue: "q", Group: g, Batch: 10})
		if payloadsOf(ms) != "a,b,c" || attemptsOf(ms) != "0,0,0" {
			t.Fatalf("group %s got %q attempts %s", g, payloadsOf(ms), attemptsOf(ms))
		}
		s := ms[0].ID + ms[1].ID + ms[2].ID
		if i > 0 && s != ids {
			t.Fatalf("group %s saw other ids: %s vs %s", g, s, ids)
		}
		ids = s
	}
	if qi := h.infoOf("q"); qi.Groups != 3 || qi.Bytes != 3 {
		t.Fatalf("groups=%d bytes=%d: the message lives in the ring once (3 bytes)", qi.Groups, qi.Bytes)
	}
}

// D1: a pop without partition takes from the partitions in a fair rotation.
func TestWildcardPopRotatesFairlyOverPartitions(t *testing.T) {
	h := newHarness(t, nil)
	for _, p := range []string{"p1", "p2", "p3"} {
		h.push("q", p, p+"-0", p+"-1")
	}
	seen := map[string][]string{}
	var order []string
	for i := 0; i < 6; i++ {
		ms := h.pop(PopRequest{Queue: "q", Group: "g", AutoAck: true})
		if len(ms) != 1 {
			t.Fatalf("pop %d got %d messages", i, len(ms))
		}
		order = append(order, ms[0].Partition)
		seen[ms[0].Partition] = append(seen[ms[0].Partition], ms[0].Payload)
	}
	if order[0] == order[1] || order[1] == order[2] || order[0] == order[2] {
		t.Fatalf("first three pops came from %v; a fair rotation visits three partitions", order[:3])
	}
	for _, p := range []string{"p1", "p2", "p3"} {
		if strings.Join(seen[p], ",") != p+"-0,"+p+"-1" {
			t.Fatalf("partition %s delivered %v, want both in order", p, seen[p])
		}
	}
}

// D1: a wildcard pop takes a lease on each partition it takes from; at most one lease per (partition, group).
func TestWildcardPopTakesOneLeasePerPartitionPerGroup(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "a1", "a2")
	h.push("q", "p2", "b1")
	first := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})
	if len(first) != 3 {
		t.Fatalf("wildcard pop took %d, want 3 from both partitions", len(first))
	}
	h.push("q", "p1", "a3")
	if ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10}); len(ms) != 0 {
		t.Fatalf("a second pop of the group took %q while both partitions are leased", payloadsOf(ms))
	}
	if ms := h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g", Batch: 10}); len(ms) != 0 {
		t.Fatalf("a partition pop took %q from a leased partition", payloadsOf(ms))
	}
	if ms := h.pop(PopRequest{Queue: "q", Group: "other", Batch: 10}); len(ms) != 4 {
		t.Fatalf("another group got %d, want 4 (leases are per group)", len(ms))
	}
	// A slow message stalls only its own partition.
	h.push("q", "p3", "c1")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "c1" {
		t.Fatalf("with p1 and p2 leased the group got %q, want c1", got)
	}
	var a1, a2 got
	for _, m := range first {
		switch m.Payload {
		case "a1":
			a1 = m
		case "a2":
			a2 = m
		}
	}
	h.ack("q", "g", AckCompleted, a1)
	if ms := h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g"}); len(ms) != 0 {
		t.Fatalf("lease with a2 in flight still live, yet the group got %q", payloadsOf(ms))
	}
	h.ack("q", "g", AckCompleted, a2)
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g"})); got != "a3" {
		t.Fatalf("after the lease was settled the group got %q, want a3", got)
	}
}

// D1: a partition is processed in order by one consumer of a group at a time.
func TestSecondConsumerOfGroupGetsNothingWhilePartitionLeased(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})); got != "a" {
		t.Fatalf("first consumer %q", got)
	}
	if ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10}); len(ms) != 0 {
		t.Fatalf("second consumer of the group got %q while the partition is leased", payloadsOf(ms))
	}
}

// D1: an autoAck pop takes no lease but skips partitions that hold a live lease for its group.
func TestAutoAckSkipsPartitionsLeasedByItsGroup(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "a1", "a2")
	h.push("q", "p2", "b1", "b2")
	a1 := h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g"})
	if payloadsOf(a1) != "a1" {
		t.Fatalf("explicit pop %q", payloadsOf(a1))
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10, AutoAck: true})); got != "b1,b2" {
		t.Fatalf("autoAck wildcard pop got %q, want only p2's", got)
	}
	if ms := h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g", AutoAck: true}); len(ms) != 0 {
		t.Fatalf("autoAck pop on the leased partition got %q", payloadsOf(ms))
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "other", AutoAck: true, Batch: 10})); got != "a1,a2" {
		t.Fatalf("another group's autoAck pop got %q", got)
	}
	h.ack("q", "g", AckCompleted, a1...)
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10, AutoAck: true})); got != "a2" {
		t.Fatalf("after the lease was settled autoAck got %q, want a2", got)
	}
}

// spec (ack mode): autoAck advances the cursor at delivery and keeps no lease: at-most-once, no redelivery.
func TestAutoAckTakesNoLeaseAndNeverRedelivers(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	a := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", AutoAck: true})
	if payloadsOf(a) != "a" {
		t.Fatalf("autoAck pop %q", payloadsOf(a))
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})); got != "b" {
		t.Fatalf("explicit pop right after autoAck got %q, want b (no lease was kept)", got)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, a...)); got != "[unknown]" {
		t.Fatalf("acking an autoAck delivery: %s, want unknown (no lease)", got)
	}
	h.advance(31 * time.Second) // b's lease expires; a must not come back
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})
	if payloadsOf(ms) != "b,c" || attemptsOf(ms) != "1,0" {
		t.Fatalf("after lease time got %q attempts %s, want b(1),c(0) and never a", payloadsOf(ms), attemptsOf(ms))
	}
	if d := groupDepth(t, h.depthOf("q", ""), "g"); d.Pending != 2 {
		t.Fatalf("group pending %d, want 2 (a settled at delivery)", d.Pending)
	}
}

// spec (pop): messages is an empty array when there is nothing; a pop names a queue into existence.
func TestPopOnEmptyQueueAnswersEmptyBatch(t *testing.T) {
	h := newHarness(t, nil)
	c := &collector{e: h.e}
	n, parked, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "inbox", Group: "g", Batch: 10}, c)
	if n != 0 || !parked.IsZero() || err != nil || len(c.msgs) != 0 || c.done {
		t.Fatalf("pop of nothing: n=%d parked=%v err=%v msgs=%d complete=%v", n, !parked.IsZero(), err, len(c.msgs), c.done)
	}
	if qi := h.infoOf("inbox"); qi.Declared || qi.Depth != 0 {
		t.Fatalf("the pop should have created an implicit empty queue: %+v", qi)
	}
}

// engine.md (waiting pops): a pop with wait and timeout 0 answers at once.
func TestPopWithWaitAndZeroTimeoutAnswersAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	c := &collector{e: h.e}
	n, parked, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "q", Wait: true, Timeout: 0}, c)
	if n != 0 || !parked.IsZero() || err != nil || c.done {
		t.Fatalf("wait with timeout 0: n=%d parked=%v err=%v", n, !parked.IsZero(), err)
	}
}

// spec (pop): the delivered message carries id, partition and attempts; D6: the id is e:<incarnation>:<partition>:<seq>.
func TestPopDeliversIdPartitionAttempts(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "room-7", "x", "y")
	ms := h.pop(PopRequest{Queue: "q", Partition: "room-7", Group: "g", Batch: 2})
	if len(ms) != 2 || ms[0].ID != "e:abcdef123456:room-7:0" || ms[1].ID != "e:abcdef123456:room-7:1" ||
		ms[0].Partition != "room-7" || ms[0].Attempts != 0 {
		t.Fatalf("delivered %+v", ms)
	}
}

// D1 + D2: an autoAck pop that takes a redelivery settles it at delivery and keeps no lease.
func TestAutoAckPopOfRedeliverySettlesIt(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	h.ack("q", "g", AckFailed, h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})...)
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", AutoAck: true})
	if payloadsOf(ms) != "a" || attemptsOf(ms) != "1" {
		t.Fatalf("autoAck got %q attempts %s, want the redelivery a(1)", payloadsOf(ms), attemptsOf(ms))
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})); got != "b" {
		t.Fatalf("explicit pop after autoAck got %q, want b (no lease kept)", got)
	}
	h.advance(31 * time.Second)
	if ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10}); payloadsOf(ms) != "b" || attemptsOf(ms) != "1" {
		t.Fatalf("after lease time got %q attempts %s, want only b(1), never a again", payloadsOf(ms), attemptsOf(ms))
	}
}

// D1, D5: a pop without partition stops at its batch: it takes no lease and
// makes no cursor in the partitions it did not need.
func TestWildcardPopStopsAtItsBatch(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "a", "1")
	h.push("q", "b", "2")
	before := h.e.CellBytes()
	if got := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 1, AutoAck: true}); len(got) != 1 {
		t.Fatalf("got %d messages, want 1", len(got))
	}
	c := &h.e.charge
	if got, want := h.e.CellBytes()-before, c.ofGroup("g")+c.cursor; got != want {
		t.Fatalf("the pop charged %d bytes, want %d: one group and one cursor", got, want)
	}
}

// hookConsumer is a collector that runs first once, inside the first
// Deliver: with that partition's lock held, in the middle of a pop.
type hookConsumer struct {
	collector
	first func()
	ran   bool
}

func (c *hookConsumer) Deliver(m Message) {
	c.collector.Deliver(m)
	if !c.ran {
		c.ran = true
		c.first()
	}
}

// lockedByOther waits until someone else holds p.mu.
func lockedByOther(p *partition) {
	for p.mu.TryLock() {
		p.mu.Unlock()
		runtime.Gosched()
	}
}

// spec (pop), D1: a pop without partition whose queue is deleted while it
// goes round the partitions answers what it delivered before, once: it does
// not start again on the queue that replaces it. The first wildcard pop of a
// queue of partitions a and b takes from b first; the delete is let run
// until it holds a and waits for b, whose lock the pop holds while it
// delivers.
func TestWildcardPopMeetingADeleteAnswersWhatItDelivered(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "a", "1")
	h.push("q", "b", "2")
	a := h.e.lookup("default", "q").findPartition("a")
	deleted := make(chan struct{})
	c := &hookConsumer{collector: collector{e: h.e}}
	c.first = func() {
		go func() {
			defer close(deleted)
			if _, err := h.e.Delete("default", "q"); err != nil {
				t.Error(err)
			}
		}()
		lockedByOther(a)
	}
	n, parked, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "q", Group: "g", Batch: 10}, c)
	<-deleted
	if err != nil || !parked.IsZero() {
		t.Fatalf("pop: err %v, parked %v", err, !parked.IsZero())
	}
	if n != 1 || payloadsOf(c.msgs) != "2" {
		t.Fatalf("pop answered %d, delivered %q; want 1, the message of b", n, payloadsOf(c.msgs))
	}
}

// D4, spec (pop): a group forgotten while a pop of it goes round the
// partitions ends that pop with what it delivered; the pop does not start
// again as the new group of that name, which would deliver the same
// messages twice. The sweep that forgets the group is let run until it
// waits for the partition lock the pop holds.
func TestPopWhoseGroupIsForgottenMidwayAnswersWhatItDelivered(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "a", "1")
	h.push("q", "b", "2")
	q := h.e.lookup("default", "q")
	swept := make(chan struct{})
	var g *group
	c := &hookConsumer{collector: collector{e: h.e}}
	c.first = func() {
		g = q.findGroup("g")
		go func() {
			defer close(swept)
			h.e.Sweep(h.clk.Now() + int64(h.e.cfg.GroupIdle+h.e.cfg.SweepEvery))
		}()
		for !g.dead.Load() {
			runtime.Gosched()
		}
	}
	n, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "q", Group: "g", Batch: 10, AutoAck: true}, c)
	<-swept
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || payloadsOf(c.msgs) != "2" {
		t.Fatalf("pop answered %d, delivered %q; want 1, the message of b, once", n, payloadsOf(c.msgs))
	}
}

// spec (consumption semantics), D3: fan-out past the number of cursors a
// partition keeps in a list (cursorIndexAt; from there it finds them
// through a map): each of 20 groups receives everything once and keeps its
// own place, and the messages become reclaimable only once the last group
// has acked them.
func TestFanOutToManyGroupsKeepsEachGroupsPlace(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	groups := numbered("g", 20)
	for _, g := range groups {
		if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: g, AutoAck: true})); got != "a" {
			t.Fatalf("group %s first got %q, want a", g, got)
		}
	}
	for i, g := range groups {
		ms := h.pop(PopRequest{Queue: "q", Group: g})
		if payloadsOf(ms) != "b" {
			t.Fatalf("group %s then got %q, want b", g, payloadsOf(ms))
		}
		h.ack("q", g, AckCompleted, ms...)
		if d := h.depthOf("q", ""); (i < len(groups)-1) != (d.Pending == 1) {
			t.Fatalf("after %d of %d groups acked b: %d pending", i+1, len(groups), d.Pending)
		}
	}
	if d := h.depthOf("q", ""); d.Pending != 0 {
		t.Fatalf("after every group acked: %d pending, want 0", d.Pending)
	}
}
