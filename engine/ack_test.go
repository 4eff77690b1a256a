package engine

import (
	"testing"
	"time"
)

// spec (ack): the four outcomes acked, redelivered, stale, unknown, one per id, none an error.
func TestAckAnswersTheFourOutcomes(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b")
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	out, err := h.e.Ack("default", "q", "g", []AckItem{
		{ID: []byte(ms[0].ID), Status: AckCompleted},
		{ID: []byte(ms[1].ID), Status: AckFailed},
		{ID: []byte("e:111111111111:Default:0"), Status: AckCompleted},
		{ID: []byte("not-an-id"), Status: AckCompleted},
	}, nil)
	if err != nil || outcomes(out) != "[acked redelivered stale unknown]" {
		t.Fatalf("outcomes %v err %v", out, err)
	}
}

// spec (ack) + D6: an id minted by another incarnation answers stale, even where the queue is gone.
func TestAckOfIdFromAnotherIncarnationIsStale(t *testing.T) {
	old := newHarness(t, func(c *Config) { c.Incarnation = 0x123456789abc })
	old.push("q", "p", "a")
	ms := old.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	h := newHarness(t, nil)
	if got := outcomes(h.ack("q", "g", AckCompleted, ms...)); got != "[stale]" {
		t.Fatalf("ack after restart: %s, want stale", got)
	}
	h.push("q", "p", "b")
	h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	if got := outcomes(h.ack("q", "g", AckFailed, ms...)); got != "[stale]" {
		t.Fatalf("ack after restart on a live queue: %s, want stale", got)
	}
}

// D2: an id that does not parse as one of ours, or names nothing delivered, is unknown.
func TestAckOfForeignIdIsUnknown(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "Default", "a")
	h.pop(PopRequest{Queue: "q", Group: "g"})
	ids := []string{"", "x", "e:", "e::Default:0", "e:zzzz:Default:0", "e:abcdef123456:Default:",
		"e:abcdef123456:Default:x", "e:abcdef123456:Default:-1", "e:abcdef123456:nope:0", "e:abcdef123456:Default:99",
		"d:abcdef123456:Default:0"}
	out := h.ackIDs("q", "g", AckCompleted, ids...)
	if len(out) != len(ids) {
		t.Fatalf("%d outcomes for %d ids", len(out), len(ids))
	}
	for i, o := range out {
		if o != OutcomeUnknown {
			t.Errorf("id %q: %v, want unknown", ids[i], o)
		}
	}
}

// spec (ack): unknown: there is no such lease, it has already been acked.
func TestDoubleAckIsUnknown(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b")
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	if got := outcomes(h.ack("q", "g", AckCompleted, ms[0])); got != "[acked]" {
		t.Fatalf("first ack %s", got)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, ms[0])); got != "[unknown]" {
		t.Fatalf("second ack %s, want unknown", got)
	}
	if got := outcomes(h.ack("q", "g", AckFailed, ms[0])); got != "[unknown]" {
		t.Fatalf("failed after completed %s, want unknown", got)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, ms[1], ms[1])); got != "[acked unknown]" {
		t.Fatalf("same id twice in one call %s, want acked unknown", got)
	}
}

// D2: an ack for an id that is not in a live lease of that group is unknown (cursors are per group).
func TestAckWithAnotherGroupIsUnknown(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a")
	ms := h.pop(PopRequest{Queue: "q", Group: "g1"})
	if got := outcomes(h.ack("q", "nobody", AckCompleted, ms...)); got != "[unknown]" {
		t.Fatalf("ack with a group that does not exist: %s", got)
	}
	h.pop(PopRequest{Queue: "q", Group: "g2"}) // g2 now holds its own lease on a
	if got := outcomes(h.ack("q", "", AckCompleted, ms...)); got != "[unknown]" {
		t.Fatalf("ack without group (queue mode): %s", got)
	}
	if got := outcomes(h.ack("q", "g1", AckCompleted, ms...)); got != "[acked]" {
		t.Fatalf("ack with the popping group: %s", got)
	}
	if got := outcomes(h.ack("nosuchqueue", "g1", AckCompleted, ms...)); got != "[unknown]" {
		t.Fatalf("ack on a queue that is not there: %s", got)
	}
}

// D2: failed makes the message available again at once, before newer messages, with attempts + 1, keeping its id.
func TestFailedAckRedeliversBeforeNewerMessagesWithAttemptsPlusOne(t *testing.T) {
	testRedeliveredFirst(t, AckFailed)
}

// D2: retry is the same as failed on this class.
func TestRetryAckRedeliversBeforeNewerMessagesWithAttemptsPlusOne(t *testing.T) {
	testRedeliveredFirst(t, AckRetry)
}

func testRedeliveredFirst(t *testing.T, status AckStatus) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	a := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	if got := outcomes(h.ack("q", "g", status, a...)); got != "[redelivered]" {
		t.Fatalf("ack %v: %s, want redelivered", status, got)
	}
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	if payloadsOf(ms) != "a,b" || attemptsOf(ms) != "1,0" || ms[0].ID != a[0].ID {
		t.Fatalf("after %v got %q attempts %s (id %s vs %s), want a(1) again first", status, payloadsOf(ms), attemptsOf(ms), ms[0].ID, a[0].ID)
	}
	if got := outcomes(h.ack("q", "g", status, ms[0])); got != "[redelivered]" {
		t.Fatalf("second failure %s", got)
	}
	h.ack("q", "g", AckCompleted, ms[1])
	ms = h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 5})
	if payloadsOf(ms) != "a,c" || attemptsOf(ms) != "2,0" {
		t.Fatalf("then got %q attempts %s, want a(2),c(0)", payloadsOf(ms), attemptsOf(ms))
	}
}

// D2: a failed message in a multi-message lease comes back once the lease is settled, still before newer ones.
func TestFailedInBatchComesBackBeforeNewer(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c", "d")
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	out, _ := h.e.Ack("default", "q", "g", []AckItem{{ID: []byte(ms[1].ID), Status: AckCompleted}, {ID: []byte(ms[0].ID), Status: AckFailed}}, nil)
	if outcomes(out) != "[acked redelivered]" {
		t.Fatalf("outcomes %v", out)
	}
	ms = h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	if payloadsOf(ms) != "a,c" || attemptsOf(ms) != "1,0" {
		t.Fatalf("got %q attempts %s, want a(1),c(0)", payloadsOf(ms), attemptsOf(ms))
	}
}

// D2: when attempts reaches retryLimit the message is dropped for the group, answered acked, counted under retry.
func TestRetryLimitDropAnswersAckedAndCountsRetry(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasRetryLimit, Options{RetryLimit: 2}))
	h.push("q", "", "a", "b")
	a := h.pop(PopRequest{Queue: "q", Group: "g"})
	if got := outcomes(h.ack("q", "g", AckFailed, a...)); got != "[redelivered]" {
		t.Fatalf("first failure: %s", got)
	}
	a = h.pop(PopRequest{Queue: "q", Group: "g"})
	if payloadsOf(a) != "a" || attemptsOf(a) != "1" {
		t.Fatalf("second delivery %q attempts %s", payloadsOf(a), attemptsOf(a))
	}
	if got := outcomes(h.ack("q", "g", AckRetry, a...)); got != "[acked]" {
		t.Fatalf("failure using the last attempt: %s, want acked", got)
	}
	if qi := h.infoOf("q"); qi.Drops.Retry != 1 || qi.Drops.Bounds != 0 || qi.Drops.TTL != 0 || h.e.Drops(CauseRetry) != 1 {
		t.Fatalf("drops %+v broker retry %d, want retry 1", qi.Drops, h.e.Drops(CauseRetry))
	}
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})
	if payloadsOf(ms) != "b" || attemptsOf(ms) != "0" {
		t.Fatalf("after the drop got %q, want b only", payloadsOf(ms))
	}
}

// D2: retryLimit N means at most N deliveries to a group.
func TestRetryLimitNMeansAtMostNDeliveries(t *testing.T) {
	for _, limit := range []int64{1, 3, 5} {
		h := newHarness(t, nil)
		h.configure("q", declare(HasRetryLimit, Options{RetryLimit: limit}))
		h.push("q", "", "a")
		deliveries := 0
		for i := 0; i < 10; i++ {
			ms := h.pop(PopRequest{Queue: "q", Group: "g"})
			if len(ms) == 0 {
				break
			}
			if ms[0].Attempts != deliveries {
				t.Fatalf("limit %d: delivery %d has attempts %d", limit, deliveries, ms[0].Attempts)
			}
			deliveries++
			want := "[redelivered]"
			if int64(deliveries) == limit {
				want = "[acked]"
			}
			if got := outcomes(h.ack("q", "g", AckFailed, ms...)); got != want {
				t.Fatalf("limit %d delivery %d: %s, want %s", limit, deliveries, got, want)
			}
		}
		if int64(deliveries) != limit || h.infoOf("q").Drops.Retry != 1 {
			t.Fatalf("limit %d: %d deliveries, %d retry drops", limit, deliveries, h.infoOf("q").Drops.Retry)
		}
	}
}

// D2: the retry drop is for that group; another group still receives the message.
func TestRetryDropIsPerGroup(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasRetryLimit, Options{RetryLimit: 1}))
	h.push("q", "", "a")
	a := h.pop(PopRequest{Queue: "q", Group: "g1"})
	if got := outcomes(h.ack("q", "g1", AckFailed, a...)); got != "[acked]" {
		t.Fatalf("g1 failure with retryLimit 1: %s", got)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g3"})); got != "a" {
		t.Fatalf("another group got %q, want a", got)
	}
}

// spec + D1: an unacknowledged message redelivers when its lease expires, with attempts + 1 and the same id.
func TestLeaseExpiryRedeliversWithAttemptsPlusOne(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	a := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	h.advance(29 * time.Second)
	if ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"}); len(ms) != 0 {
		t.Fatalf("before leaseSeconds (30) the group got %q", payloadsOf(ms))
	}
	h.advance(time.Second)
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	if payloadsOf(ms) != "a,b" || attemptsOf(ms) != "1,0" || ms[0].ID != a[0].ID {
		t.Fatalf("after the lease expired got %q attempts %s", payloadsOf(ms), attemptsOf(ms))
	}
}

// spec (ack): unknown: the lease expired and the message was redelivered.
func TestAckAfterLeaseExpiryIsUnknown(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a")
	a := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	h.advance(30 * time.Second)
	if got := outcomes(h.ack("q", "g", AckCompleted, a...)); got != "[unknown]" {
		t.Fatalf("ack after the lease expired: %s, want unknown", got)
	}
	if ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"}); payloadsOf(ms) != "a" || attemptsOf(ms) != "1" {
		t.Fatalf("the late ack must not settle it: got %q attempts %s", payloadsOf(ms), attemptsOf(ms))
	}
}

// D1: when a lease expires every unsettled message in it goes back with attempts + 1.
func TestLeaseExpiryRedeliversEveryUnsettledMessageOfTheLease(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c", "d")
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 3})
	h.ack("q", "g", AckCompleted, ms[1])
	h.advance(30 * time.Second)
	ms = h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})
	if payloadsOf(ms) != "a,c,d" || attemptsOf(ms) != "1,1,0" {
		t.Fatalf("after expiry got %q attempts %s, want a(1),c(1),d(0)", payloadsOf(ms), attemptsOf(ms))
	}
}

// spec (configure): leaseSeconds is how long an unacknowledged message is held before redelivery.
func TestLeaseSecondsOptionSetsTheLeaseLength(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasLeaseSeconds, Options{LeaseSeconds: 5}))
	h.push("q", "", "a")
	h.pop(PopRequest{Queue: "q", Group: "g"})
	h.advance(4990 * time.Millisecond)
	if ms := h.pop(PopRequest{Queue: "q", Group: "g"}); len(ms) != 0 {
		t.Fatalf("redelivered before 5 s")
	}
	h.advance(10 * time.Millisecond)
	if ms := h.pop(PopRequest{Queue: "q", Group: "g"}); attemptsOf(ms) != "1" {
		t.Fatalf("after 5 s got %q attempts %s", payloadsOf(ms), attemptsOf(ms))
	}
}

// spec: a message whose lease expires retryLimit times is dropped and counted under retry.
func TestLeaseExpiryAtRetryLimitDropsAndCountsRetry(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasRetryLimit, Options{RetryLimit: 2}))
	h.push("q", "", "a", "b")
	h.pop(PopRequest{Queue: "q", Group: "g"})
	h.advance(30 * time.Second)
	if ms := h.pop(PopRequest{Queue: "q", Group: "g"}); payloadsOf(ms) != "a" || attemptsOf(ms) != "1" {
		t.Fatalf("second delivery %q attempts %s", payloadsOf(ms), attemptsOf(ms))
	}
	h.advance(30 * time.Second)
	if ms := h.pop(PopRequest{Queue: "q", Group: "g"}); payloadsOf(ms) != "b" || attemptsOf(ms) != "0" {
		t.Fatalf("after two expiries got %q, want b", payloadsOf(ms))
	}
	if r := h.infoOf("q").Drops.Retry; r != 1 {
		t.Fatalf("retry drops %d, want 1", r)
	}
}

// D2: acks may arrive out of order; the lease is released when all its messages are settled.
func TestAcksOutOfOrderSettleAndReleaseTheLease(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c", "d")
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 3})
	if got := outcomes(h.ack("q", "g", AckCompleted, ms[2], ms[0])); got != "[acked acked]" {
		t.Fatalf("out-of-order acks %s", got)
	}
	if gd := groupDepth(t, h.depthOf("q", ""), "g"); gd.Pending != 2 {
		t.Fatalf("group pending %d, want 2 (b in flight, d new)", gd.Pending)
	}
	if got := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"}); len(got) != 0 {
		t.Fatalf("lease released early: got %q", payloadsOf(got))
	}
	h.ack("q", "g", AckCompleted, ms[1])
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})); got != "d" {
		t.Fatalf("after the lease was settled got %q, want d", got)
	}
}

// D13: a lease that is released (all settled) wakes a parked pop of the group.
func TestLeaseReleaseWakesParkedPop(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	a := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10, Timeout: time.Minute})
	if c.done {
		t.Fatal("parked pop completed before the lease was released")
	}
	h.ack("q", "g", AckCompleted, a...)
	if !c.done || c.completed != 1 || payloadsOf(c.msgs) != "b" {
		t.Fatalf("after release: done=%v completed=%d got %q, want b", c.done, c.completed, payloadsOf(c.msgs))
	}
}

// D2: a message freed while in flight (ttl, room) leaves the lease; its ack answers unknown.
func TestAckOfMessageFreedWhileInFlightIsUnknown(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasTTLSeconds, Options{TTLSeconds: 5}))
	h.push("q", "", "a")
	a := h.pop(PopRequest{Queue: "q", Group: "g"})
	h.advance(5 * time.Second)
	if got := outcomes(h.ack("q", "g", AckCompleted, a...)); got != "[unknown]" {
		t.Fatalf("ack of a message ttl freed: %s, want unknown", got)
	}
	h.push("q", "", "b")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g"})); got != "b" {
		t.Fatalf("the lease should be gone with its message; got %q", got)
	}
}

// spec (ack): at most 10,000 acks per call.
func TestAckOver10000ItemsIsBadRequest(t *testing.T) {
	h := newHarness(t, nil)
	if _, err := h.e.Ack("default", "q", "g", make([]AckItem, MaxBatch+1), nil); CodeOf(err) != CodeBadRequest {
		t.Fatalf("ack of 10,001: %v", err)
	}
	out, err := h.e.Ack("default", "q", "g", make([]AckItem, MaxBatch), nil)
	if err != nil || len(out) != MaxBatch {
		t.Fatalf("ack of 10,000: %d outcomes, %v", len(out), err)
	}
}

// spec (ack): status is completed (the default), failed or retry.
func TestParseAckStatus(t *testing.T) {
	for s, want := range map[string]AckStatus{"": AckCompleted, "completed": AckCompleted, "failed": AckFailed, "retry": AckRetry} {
		if got, ok := ParseAckStatus(s); !ok || got != want {
			t.Errorf("%q: %v %v", s, got, ok)
		}
	}
	for _, s := range []string{"Completed", "ok", "acked", "nack"} {
		if _, ok := ParseAckStatus(s); ok {
			t.Errorf("%q accepted", s)
		}
	}
}

// D6: the partition may hold colons; the id still names it.
func TestAckOfIdWhosePartitionHoldsColons(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "a:b:7", "x")
	ms := h.pop(PopRequest{Queue: "q", Partition: "a:b:7", Group: "g"})
	if ms[0].ID != "e:abcdef123456:a:b:7:0" {
		t.Fatalf("id %s", ms[0].ID)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, ms...)); got != "[acked]" {
		t.Fatalf("ack %s", got)
	}
}

// D1 + D2: a message failed inside a lease is not counted again when that lease later expires.
func TestLeaseExpiryDoesNotCountAFailedMessageTwice(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	if got := outcomes(h.ack("q", "g", AckFailed, ms[0])); got != "[redelivered]" {
		t.Fatalf("failed: %s", got)
	}
	h.advance(30 * time.Second) // b's lease expires
	ms = h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	if payloadsOf(ms) != "a,b" || attemptsOf(ms) != "1,1" {
		t.Fatalf("got %q attempts %s, want a(1),b(1)", payloadsOf(ms), attemptsOf(ms))
	}
}

// D2: one ack call may settle ids of several partitions, interleaved.
func TestAckAcrossPartitionsInOneCall(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "a1", "a2")
	h.push("q", "p2", "b1")
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})
	if len(ms) != 3 {
		t.Fatalf("popped %d", len(ms))
	}
	var a1, a2, b1 got
	for _, m := range ms {
		switch m.Payload {
		case "a1":
			a1 = m
		case "a2":
			a2 = m
		case "b1":
			b1 = m
		}
	}
	out, err := h.e.Ack("default", "q", "g", []AckItem{
		{ID: []byte(a1.ID)}, {ID: []byte(b1.ID), Status: AckFailed}, {ID: []byte(a2.ID)},
	}, nil)
	if err != nil || outcomes(out) != "[acked redelivered acked]" {
		t.Fatalf("outcomes %v %v", out, err)
	}
	if gd := h.depthOf("q", "g"); gd.Pending != 1 {
		t.Fatalf("pending %d, want 1 (b1 for redelivery)", gd.Pending)
	}
}

// D13: a lease that is released wakes a parked pop without partition.
func TestLeaseReleaseWakesParkedWildcardPop(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	a := h.pop(PopRequest{Queue: "q", Group: "g"})
	c, _ := h.park(PopRequest{Queue: "q", Group: "g", Batch: 10})
	h.ack("q", "g", AckCompleted, a...)
	if !c.done || payloadsOf(c.msgs) != "b" {
		t.Fatalf("after release: done=%v got %q", c.done, payloadsOf(c.msgs))
	}
}

// D1 + D2: a failed message waits while the lease still has messages in flight; the release wakes the parked pop.
func TestFailedMessageWaitsForLeaseRelease(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 2})
	c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})
	h.ack("q", "g", AckFailed, ms[0])
	if c.done {
		t.Fatalf("a second consumer of the group got %q while b is still in flight", payloadsOf(c.msgs))
	}
	h.ack("q", "g", AckCompleted, ms[1])
	if !c.done || payloadsOf(c.msgs) != "a" || attemptsOf(c.msgs) != "1" {
		t.Fatalf("after release: done=%v got %q attempts %s", c.done, payloadsOf(c.msgs), attemptsOf(c.msgs))
	}
}

// D2: redeliveries come back in seq order, no more than the batch asks for,
// each with its own attempts.
func TestRedeliveriesRespectTheBatchAndTheirOrder(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	h.ack("q", "g", AckFailed, ms...)
	got := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 1})
	if payloadsOf(got) != "a" || attemptsOf(got) != "1" {
		t.Fatalf("batch 1 after two failures: %q attempts %s, want a with 1", payloadsOf(got), attemptsOf(got))
	}
	h.ack("q", "g", AckFailed, got...)
	got = h.pop(PopRequest{Queue: "q", Group: "g", Batch: 3})
	if payloadsOf(got) != "a,b,c" || attemptsOf(got) != "2,1,0" {
		t.Fatalf("batch 3: %q attempts %s, want a,b,c with 2,1,0", payloadsOf(got), attemptsOf(got))
	}
}

// D2: an id of a message held but not yet delivered to the group is not in
// its lease: unknown, and the lease is untouched.
func TestAckOfUndeliveredMessageIsUnknown(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 1})
	next := string(h.e.AppendID(nil, "p", ms[0].Seq+1))
	if out := outcomes(h.ackIDs("q", "g", AckCompleted, next)); out != "[unknown]" {
		t.Fatalf("ack of the undelivered b: %s, want [unknown]", out)
	}
	if out := outcomes(h.ack("q", "g", AckCompleted, ms...)); out != "[acked]" {
		t.Fatalf("ack of a: %s, want [acked]", out)
	}
}

// D13: a parked pop wakes for what it can take. A lease released by another
// group makes nothing available to it: it stays parked, after a message it
// had failed was redelivered and settled, or was dropped while waiting for
// redelivery.
func TestParkedPopStaysParkedAfterRedeliveries(t *testing.T) {
	for _, dropped := range []bool{false, true} {
		h := newHarness(t, nil)
		h.configure("q", declare(HasPolicy|HasMaxLength, Options{Policy: PolicyDropOldest, MaxLength: 1}))
		h.push("q", "p", "a")
		h.ack("q", "g", AckFailed, h.pop(PopRequest{Queue: "q", Group: "g"})...)
		want := "a"
		if dropped {
			h.push("q", "p", "b") // drops a, waiting for redelivery
			want = "b"
		}
		ms := h.pop(PopRequest{Queue: "q", Group: "g"})
		if payloadsOf(ms) != want {
			t.Fatalf("dropped=%v: g got %q, want %s", dropped, payloadsOf(ms), want)
		}
		h.ack("q", "g", AckCompleted, ms...)
		c, _ := h.park(PopRequest{Queue: "q", Partition: "p", Group: "g"})
		h.ack("q", "other", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "other"})...)
		if c.isDone() {
			t.Fatalf("dropped=%v: the parked pop was answered (%d) by another group's release", dropped, c.completed)
		}
		h.push("q", "p", "z")
		if !c.isDone() || payloadsOf(c.msgs) != "z" {
			t.Fatalf("dropped=%v: parked pop got %q (done %v), want z", dropped, payloadsOf(c.msgs), c.isDone())
		}
	}
}

// engine.md (what the budgets count): a window reuses the room at its front
// before it grows, so a lease that follows a partly settled one charges no
// more entries.
func TestWindowReusesItsRoomBeforeGrowing(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})
	h.ack("q", "g", AckCompleted, ms[0])
	h.ack("q", "g", AckFailed, ms[1])
	h.push("q", "p", "c")
	before := h.e.CellBytes()
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})); got != "b,c" {
		t.Fatalf("got %q, want b,c", got)
	}
	if got := h.e.CellBytes(); got != before {
		t.Fatalf("cell bytes %d after the second lease, want %d (the window's room reused)", got, before)
	}
}

// D1: a lease ends exactly leaseSeconds after its pop: a pop at that
// instant gets the message back with attempts + 1.
func TestLeaseEndsAtExactlyLeaseSeconds(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasLeaseSeconds, Options{LeaseSeconds: 5}))
	h.push("q", "p", "a")
	h.pop(PopRequest{Queue: "q", Group: "g"})
	h.clk.Add(5 * time.Second)
	h.e.now.Store(h.clk.Now()) // engine time has come, the wheel has not ticked yet
	got := h.pop(PopRequest{Queue: "q", Group: "g"})
	if payloadsOf(got) != "a" || attemptsOf(got) != "1" {
		t.Fatalf("pop at the lease's end: %q attempts %s, want a with 1", payloadsOf(got), attemptsOf(got))
	}
}
