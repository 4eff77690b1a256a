package engine

import (
	"testing"
	"time"
)

// spec (ttlSeconds is not retention): ttlSeconds drops messages older than the limit, consumed or not.
func TestTTLDropsMessagesConsumedOrNot(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 10}))
	h.push("q", "", "consumed")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g"})...)
	h.advance(5 * time.Second)
	h.push("q", "", "pending")
	h.advance(4990 * time.Millisecond)
	if qi := h.infoOf("q"); qi.Bytes != payloadLen("consumed", "pending") || qi.Depth != 1 {
		t.Fatalf("before 10 s: bytes=%d depth=%d", qi.Bytes, qi.Depth)
	}
	h.advance(10 * time.Millisecond) // the consumed message is 10 s old
	if qi := h.infoOf("q"); qi.Bytes != payloadLen("pending") || qi.Depth != 1 {
		t.Fatalf("at 10 s: bytes=%d depth=%d, want the consumed message gone", qi.Bytes, qi.Depth)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "late", Batch: 10})); got != "pending" {
		t.Fatalf("a late group got %q, want only the message still held", got)
	}
	h.advance(5 * time.Second) // the pending one, leased by late, is 10 s old
	qi := h.infoOf("q")
	if qi.Bytes != 0 || qi.Depth != 0 || h.e.CellBytes() != 0 {
		t.Fatalf("at 15 s: bytes=%d depth=%d cell=%d, want empty", qi.Bytes, qi.Depth, h.e.CellBytes())
	}
	if ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10}); len(ms) != 0 {
		t.Fatalf("an expired message was delivered: %q", payloadsOf(ms))
	}
}

// engine.md (drops): ttl drops count only the messages that were still pending.
func TestTTLCountsOnlyPendingMessages(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 10}))
	h.push("q", "", "a", "b", "c")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})...)
	h.advance(10 * time.Second)
	if qi := h.infoOf("q"); qi.Drops != (Drops{TTL: 1}) || h.e.Drops(CauseTTL) != 1 || qi.Bytes != 0 {
		t.Fatalf("drops %+v broker ttl %d bytes %d, want ttl 1 (only c was pending)", qi.Drops, h.e.Drops(CauseTTL), qi.Bytes)
	}
}

// D5: a message dropped by ttl before a group received it counts as skipped for that group.
func TestTTLDropCountsSkippedForGroupThatNeverReceivedIt(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 10}))
	h.push("q", "", "a", "b")
	h.pop(PopRequest{Queue: "q", Group: "g"}) // a delivered (in flight), b never
	h.advance(10 * time.Second)
	if gd := groupDepth(t, h.depthOf("q", ""), "g"); gd.Skipped != 1 || gd.Pending != 0 {
		t.Fatalf("g skipped=%d pending=%d, want 1 and 0", gd.Skipped, gd.Pending)
	}
}

// spec (configure): ttlSeconds 0 is off: nothing ages out.
func TestTTLZeroIsOff(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 0}))
	h.push("q", "", "a")
	h.advance(48 * time.Hour)
	if qi := h.infoOf("q"); qi.Depth != 1 || qi.Drops.TTL != 0 {
		t.Fatalf("with ttl off: depth=%d ttl drops=%d", qi.Depth, qi.Drops.TTL)
	}
}

// D9: changing ttlSeconds applies to what is held: on, shorter, and back off.
func TestChangingTTLAppliesToWhatIsHeld(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{})
	h.push("q", "", "old")
	h.advance(20 * time.Second)
	h.push("q", "", "new")
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 10}))
	h.advance(10 * time.Millisecond)
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10, AutoAck: true})); got != "new" {
		t.Fatalf("after ttl turned on got %q, want old dropped (20 s old)", got)
	}
	if d := h.infoOf("q").Drops.TTL; d != 1 {
		t.Fatalf("ttl drops %d, want 1", d)
	}
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 60}))
	h.push("q", "", "x")
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 2}))
	h.advance(2 * time.Second)
	if qi := h.infoOf("q"); qi.Depth != 0 || qi.Bytes != 0 {
		t.Fatalf("after ttl shortened to 2 s: depth=%d bytes=%d", qi.Depth, qi.Bytes)
	}
	h.push("q", "", "kept")
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 0}))
	h.advance(time.Hour)
	if qi := h.infoOf("q"); qi.Depth != 1 {
		t.Fatalf("after ttl turned back off depth=%d, want 1", qi.Depth)
	}
}

// D8 + D9: the tenant default ttlSeconds (QUEEN_EPHEMERAL_TTL_S) bounds implicit queues.
func TestTenantDefaultTTLBoundsImplicitQueues(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Defaults.TTLSeconds = 30 })
	h.push("inbox", "", "unread reply")
	h.advance(30 * time.Second)
	if qi := h.infoOf("inbox"); qi.Depth != 0 || qi.Drops.TTL != 1 {
		t.Fatalf("implicit queue after the default ttl: depth=%d ttl drops=%d", qi.Depth, qi.Drops.TTL)
	}
}

// spec: ttl drops apply per message age, oldest first, leaving younger ones.
func TestTTLDropsOnlyMessagesOlderThanTheLimit(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 3}))
	h.push("q", "p", "t0")
	h.advance(time.Second)
	h.push("q", "p", "t1")
	h.advance(time.Second)
	h.push("q", "p", "t2")
	h.advance(time.Second) // t0 is 3 s old
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10, AutoAck: true})); got != "t1,t2" {
		t.Fatalf("at 3 s got %q, want t1,t2", got)
	}
}

func payloadLen(ps ...string) int64 {
	var n int64
	for _, p := range ps {
		n += int64(len(p))
	}
	return n
}

// ttl: a message exactly ttlSeconds old is dropped at that instant.
func TestTTLDropsAtExactlyTheLimit(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 1}))
	h.push("q", "p", "a")
	h.advance(time.Second)
	if qi := h.infoOf("q"); qi.Depth != 0 || qi.Drops.TTL != 1 {
		t.Fatalf("after exactly 1 s: depth %d ttl drops %d, want 0 and 1", qi.Depth, qi.Drops.TTL)
	}
}
