package engine

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// spec (pop) + D13: a parked pop is completed by a push.
func TestParkedPopCompletedByPush(t *testing.T) {
	h := newHarness(t, nil)
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10, Timeout: 5 * time.Second})
	if c.done || len(c.msgs) != 0 {
		t.Fatal("parked pop answered before anything arrived")
	}
	h.push("q", "p", "a", "b")
	if !c.done || c.completed != 2 || payloadsOf(c.msgs) != "a,b" || attemptsOf(c.msgs) != "0,0" {
		t.Fatalf("after push: done=%v completed=%d got %q", c.done, c.completed, payloadsOf(c.msgs))
	}
	if gd := groupDepth(t, h.depthOf("q", ""), "g"); gd.Pending != 2 {
		t.Fatalf("delivered messages are leased and unsettled: pending %d", gd.Pending)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, c.msgs...)); got != "[acked acked]" {
		t.Fatalf("acks of a woken pop's messages: %s", got)
	}
}

// engine.md (waiting pops): a woken pop without partition takes from the partition that woke it.
func TestParkedWildcardPopWokenByPushToAnyPartition(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "old")
	h.pop(PopRequest{Queue: "q", Group: "g"}) // p1 leased by g
	c, _ := h.park(PopRequest{Queue: "q", Group: "g", Batch: 10})
	h.push("q", "p1", "blocked") // p1 is leased for g: not available
	if c.done {
		t.Fatalf("woken by a push to a leased partition: %q", payloadsOf(c.msgs))
	}
	h.push("q", "p9", "x")
	if !c.done || c.completed != 1 || payloadsOf(c.msgs) != "x" || c.msgs[0].Partition != "p9" {
		t.Fatalf("after push to p9: done=%v got %+v", c.done, c.msgs)
	}
}

// D13: a parked pop that named a partition wakes only for that partition.
func TestParkedPopOnPartitionIgnoresOtherPartitions(t *testing.T) {
	h := newHarness(t, nil)
	c, _ := h.park(PopRequest{Queue: "q", Partition: "mine", Group: "g"})
	h.push("q", "other", "x")
	if c.done {
		t.Fatalf("woken by another partition: %q", payloadsOf(c.msgs))
	}
	h.push("q", "mine", "y")
	if !c.done || payloadsOf(c.msgs) != "y" {
		t.Fatalf("got %q", payloadsOf(c.msgs))
	}
}

// spec (pop): a waiting pop whose timeout expires answers with an empty batch.
func TestParkedPopTimesOutWithEmptyBatch(t *testing.T) {
	h := newHarness(t, nil)
	c, _ := h.park(PopRequest{Queue: "q", Group: "g", Timeout: 2 * time.Second})
	h.advance(1990 * time.Millisecond)
	if c.done {
		t.Fatal("completed before its timeout")
	}
	h.advance(10 * time.Millisecond)
	if !c.done || c.completed != 0 || len(c.msgs) != 0 {
		t.Fatalf("at timeout: done=%v completed=%d msgs=%d, want an empty answer", c.done, c.completed, len(c.msgs))
	}
	h.push("q", "", "late")
	if len(c.msgs) != 0 || c.completed != 0 {
		t.Fatal("a timed-out pop received a later message")
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g"})); got != "late" {
		t.Fatalf("the later message went astray: %q", got)
	}
}

// D13: a parked pop wakes on a lease that expires.
func TestParkedPopCompletedByLeaseExpiry(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a")
	a := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Timeout: time.Minute})
	h.advance(29 * time.Second)
	if c.done {
		t.Fatal("woken before the lease expired")
	}
	h.advance(time.Second)
	if !c.done || c.completed != 1 || payloadsOf(c.msgs) != "a" || attemptsOf(c.msgs) != "1" || c.msgs[0].ID != a[0].ID {
		t.Fatalf("after lease expiry: done=%v got %+v, want a with attempts 1", c.done, c.msgs)
	}
}

// D13: a parked wildcard pop wakes on a lease that expires.
func TestParkedWildcardPopCompletedByLeaseExpiry(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a")
	h.pop(PopRequest{Queue: "q", Group: "g"})
	c, _ := h.park(PopRequest{Queue: "q", Group: "g", Timeout: time.Minute})
	h.advance(30 * time.Second)
	if !c.done || payloadsOf(c.msgs) != "a" || attemptsOf(c.msgs) != "1" {
		t.Fatalf("after lease expiry: done=%v got %+v", c.done, c.msgs)
	}
}

// D13: a parked pop wakes on a failed ack.
func TestParkedPopCompletedByFailedAck(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a")
	a := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	if got := outcomes(h.ack("q", "g", AckFailed, a...)); got != "[redelivered]" {
		t.Fatalf("failed ack: %s", got)
	}
	if !c.done || payloadsOf(c.msgs) != "a" || attemptsOf(c.msgs) != "1" {
		t.Fatalf("after failed ack: done=%v got %+v", c.done, c.msgs)
	}
}

// D13: a parked pop whose connection closes is removed at once; messages are never handed to it.
func TestCancelRemovesParkedPop(t *testing.T) {
	h := newHarness(t, nil)
	c, parked := h.park(PopRequest{Queue: "q", Group: "g", Timeout: 5 * time.Second})
	if !h.e.Cancel(parked) {
		t.Fatal("Cancel of a parked pop reported false")
	}
	if h.e.Cancel(parked) {
		t.Fatal("a second Cancel reported true")
	}
	h.push("q", "", "a")
	h.advance(10 * time.Second)
	if c.done || len(c.msgs) != 0 {
		t.Fatalf("a cancelled pop was answered: done=%v msgs=%d", c.done, len(c.msgs))
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g"})); got != "a" {
		t.Fatalf("the message pushed after Cancel went to %q", got)
	}
}

// engine.md: Cancel of a pop that was already completed reports false.
func TestCancelAfterCompletionReportsFalse(t *testing.T) {
	h := newHarness(t, nil)
	c, parked := h.park(PopRequest{Queue: "q"})
	h.push("q", "", "a")
	if !c.done || h.e.Cancel(parked) {
		t.Fatalf("done=%v; Cancel after completion must report false", c.done)
	}
	if h.e.Cancel(Parked{}) {
		t.Fatal("Cancel of a zero handle reported true")
	}
}

// spec (delete) + engine: parked pops on a deleted queue are answered with an empty batch.
func TestDeleteAnswersParkedPopsWithEmptyBatch(t *testing.T) {
	h := newHarness(t, nil)
	onPart, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	anyPart, _ := h.park(PopRequest{Queue: "q", Group: "g2"})
	if existed, err := h.e.Delete("default", "q"); !existed || err != nil {
		t.Fatalf("delete: %v %v", existed, err)
	}
	for i, c := range []*collector{onPart, anyPart} {
		if !c.done || c.completed != 0 || len(c.msgs) != 0 {
			t.Fatalf("waiter %d after delete: done=%v completed=%d", i, c.done, c.completed)
		}
	}
	h.push("q", "p", "new")
	if len(onPart.msgs)+len(anyPart.msgs) != 0 {
		t.Fatal("a released waiter received a message of the re-created queue")
	}
}

// D15 (engine part): ReleaseWaiters answers every parked pop with an empty batch.
func TestReleaseWaitersAnswersParkedPopsEmpty(t *testing.T) {
	h := newHarness(t, nil)
	var cs []*collector
	for i, q := range []string{"q1", "q2", "q2"} {
		c, _ := h.park(PopRequest{Queue: q, Partition: fmt.Sprint("p", i%2), Group: "g"})
		cs = append(cs, c)
	}
	c, _ := h.park(PopRequest{Queue: "q1", Group: "w"})
	cs = append(cs, c)
	h.e.ReleaseWaiters()
	for i, c := range cs {
		if !c.done || c.completed != 0 || len(c.msgs) != 0 {
			t.Fatalf("waiter %d: done=%v completed=%d", i, c.done, c.completed)
		}
	}
	h.push("q1", "p0", "x")
	for i, c := range cs {
		if len(c.msgs) != 0 {
			t.Fatalf("released waiter %d received a message", i)
		}
	}
}

// D12: with a windowBuffer, a woken pop waits until count messages are ready.
func TestWindowBufferWaitsForCount(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 1000, WindowCount: 3}))
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})
	h.push("q", "p", "a")
	h.advance(100 * time.Millisecond)
	h.push("q", "p", "b")
	if c.done {
		t.Fatalf("answered with %d before count 3 or ms 1000", c.completed)
	}
	h.push("q", "p", "c")
	if !c.done || c.completed != 3 || payloadsOf(c.msgs) != "a,b,c" {
		t.Fatalf("at count: done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D12: with a windowBuffer, a woken pop waits at most ms after its first message.
func TestWindowBufferWaitsAtMostMs(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 100, WindowCount: 50}))
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10, Timeout: time.Minute})
	h.advance(5 * time.Second)
	h.push("q", "p", "a")
	h.advance(50 * time.Millisecond)
	h.push("q", "p", "b")
	h.advance(40 * time.Millisecond)
	if c.done {
		t.Fatal("answered before the window's ms")
	}
	h.advance(10 * time.Millisecond)
	if !c.done || c.completed != 2 || payloadsOf(c.msgs) != "a,b" {
		t.Fatalf("at window end: done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D12: the window's count is at most the pop's batch.
func TestWindowBufferCountIsAtMostBatch(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 1000, WindowCount: 10}))
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	h.push("q", "p", "a", "b", "c")
	if !c.done || payloadsOf(c.msgs) != "a,b" {
		t.Fatalf("batch 2 filled: done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D12: a window never keeps a pop past its own timeout.
func TestWindowBufferNeverPastPopTimeout(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 10000, WindowCount: 5}))
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10, Timeout: 500 * time.Millisecond})
	h.advance(100 * time.Millisecond)
	h.push("q", "p", "a")
	h.advance(390 * time.Millisecond)
	if c.done {
		t.Fatal("answered before its timeout")
	}
	h.advance(10 * time.Millisecond)
	if !c.done || c.completed != 1 || payloadsOf(c.msgs) != "a" {
		t.Fatalf("at the pop timeout: done=%v got %q, want a", c.done, payloadsOf(c.msgs))
	}
}

// D12 + engine.md: windowBuffer ms 0 means no window: the first message answers at once.
func TestWindowBufferOffAnswersAtFirstMessage(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 0, WindowCount: 5}))
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})
	h.push("q", "p", "a")
	if !c.done || payloadsOf(c.msgs) != "a" {
		t.Fatalf("no window: done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D13: a push wakes parked pops in order; within a group only the first gets the partition.
func TestPushWakesParkedPopsInOrder(t *testing.T) {
	h := newHarness(t, nil)
	first, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	second, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	other, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "fan"})
	h.push("q", "p", "a", "b")
	if !first.done || payloadsOf(first.msgs) != "a" {
		t.Fatalf("first waiter: done=%v got %q", first.done, payloadsOf(first.msgs))
	}
	if second.done {
		t.Fatalf("second waiter of the same group got %q while the partition is leased", payloadsOf(second.msgs))
	}
	if !other.done || payloadsOf(other.msgs) != "a" {
		t.Fatalf("another group's waiter: done=%v got %q", other.done, payloadsOf(other.msgs))
	}
	h.ack("q", "g", AckCompleted, first.msgs...)
	if !second.done || payloadsOf(second.msgs) != "b" {
		t.Fatalf("second waiter after release: done=%v got %q", second.done, payloadsOf(second.msgs))
	}
}

// spec (pop) + P5: an idle waiter costs a parked task and nothing else: no goroutine per parked pop.
func TestParkedPopsCostNoGoroutine(t *testing.T) {
	h := newHarness(t, nil)
	const n = 10000
	runtime.GC()
	before := runtime.NumGoroutine()
	cs := make([]*collector, n)
	for i := range cs {
		cs[i], _ = h.park(PopRequest{Queue: fmt.Sprintf("inbox-%d", i), Group: "g", Timeout: time.Minute})
	}
	after := runtime.NumGoroutine()
	if after > before+5 {
		t.Fatalf("%d parked pops: goroutines %d -> %d", n, before, after)
	}
	h.push("inbox-4242", "", "reply")
	if !cs[4242].done || payloadsOf(cs[4242].msgs) != "reply" || cs[4241].done || cs[4243].done {
		t.Fatal("the reply did not go to its own inbox's waiter only")
	}
	h.e.ReleaseWaiters()
	for i, c := range cs {
		if !c.done {
			t.Fatalf("waiter %d not released", i)
		}
	}
}

// D13: Close answers every parked pop with an empty batch; verbs after Close refuse.
func TestCloseAnswersParkedPopsAndRefusesVerbs(t *testing.T) {
	h := newHarness(t, nil)
	c, _ := h.park(PopRequest{Queue: "q", Group: "g"})
	h.e.Close()
	if !c.done || c.completed != 0 {
		t.Fatalf("after Close: done=%v completed=%d", c.done, c.completed)
	}
	if _, err := h.pushErr("q", "", "a"); CodeOf(err) != CodeClosed {
		t.Fatalf("push after close: %v", err)
	}
	if _, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "q"}, &collector{}); CodeOf(err) != CodeClosed {
		t.Fatalf("pop after close: %v", err)
	}
	if _, err := h.e.Ack("default", "q", "g", nil, nil); CodeOf(err) != CodeClosed {
		t.Fatalf("ack after close: %v", err)
	}
	if err := h.e.Configure("default", "q", OptionSet{}); CodeOf(err) != CodeClosed {
		t.Fatalf("configure after close: %v", err)
	}
}

// D12 + engine.md: windowBuffer count 0 means the pop's batch.
func TestWindowBufferCountZeroMeansBatch(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 1000, WindowCount: 0}))
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 3})
	h.push("q", "p", "a", "b")
	if c.done {
		t.Fatal("answered before the batch was full or the window ended")
	}
	h.push("q", "p", "c")
	if !c.done || payloadsOf(c.msgs) != "a,b,c" {
		t.Fatalf("done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D12: the window applies to a parked pop without partition too.
func TestWindowBufferOnWildcardPop(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 100, WindowCount: 2}))
	c, _ := h.park(PopRequest{Queue: "q", Group: "g", Batch: 10})
	h.push("q", "p", "a")
	if c.done {
		t.Fatal("answered at the first message despite the window")
	}
	h.push("q", "p", "b")
	if !c.done || payloadsOf(c.msgs) != "a,b" {
		t.Fatalf("done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// engine.md (waiting pops): a window that ends with nothing left to take (another consumer took it) parks again until its timeout.
func TestWindowEndingWithNothingLeftParksAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasWindowBuffer, Options{WindowMs: 100, WindowCount: 5}))
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10, Timeout: time.Second})
	h.push("q", "p", "a")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})); got != "a" {
		t.Fatalf("a competing consumer got %q", got)
	}
	h.advance(100 * time.Millisecond)
	if c.done {
		t.Fatalf("answered %d at window end with nothing to take", c.completed)
	}
	h.advance(900 * time.Millisecond)
	if !c.done || c.completed != 0 {
		t.Fatalf("at its timeout: done=%v completed=%d", c.done, c.completed)
	}
}

// D13: one push can complete more parked pops than fit the engine's inline
// list of them (8): every one is answered.
func TestOnePushCompletesManyParkedPops(t *testing.T) {
	h := newHarness(t, nil)
	var cs []*collector
	for i := 0; i < 12; i++ {
		c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: fmt.Sprintf("g%d", i), AutoAck: true})
		cs = append(cs, c)
	}
	h.push("q", "p", "m")
	for i, c := range cs {
		if !c.isDone() || payloadsOf(c.msgs) != "m" {
			t.Fatalf("parked pop %d: done %v, got %q; want m", i, c.isDone(), payloadsOf(c.msgs))
		}
	}
}
