package engine

import (
	"errors"
	"strings"
	"testing"
)

// spec (push): the push is all or nothing: if the queue is at a bound whose
// policy is reject, nothing in that request is appended.
func TestPushIsAllOrNothingUnderReject(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 5}))
	h.push("q", "p", "a0", "a1", "a2", "a3")
	if _, err := h.pushErr("q", "p", "b0", "b1"); !errors.Is(err, ErrQueueFull) || CodeOf(err) != CodeQueueFull {
		t.Fatalf("push past maxLength: err=%v, want queue_full", err)
	}
	if qi := h.infoOf("q"); qi.Depth != 4 || qi.Bytes != 8 {
		t.Fatalf("after refused push depth=%d bytes=%d, want 4 and 8", qi.Depth, qi.Bytes)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10, AutoAck: true})); got != "a0,a1,a2,a3" {
		t.Fatalf("popped %q, want only the first push", got)
	}
}

// spec (push) + D7: a budget above the queue that refuses appends nothing either.
func TestPushIsAllOrNothingWhenTenantAllowanceRefuses(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.e.SetTenantLimits("default", 10, 0)
	h.push("q", "", "aaaaa")
	if _, err := h.pushErr("q", "", "bbb", "ccc"); !errors.Is(err, ErrTenantBytes) {
		t.Fatalf("push past the tenant allowance: err=%v", err)
	}
	if qi := h.infoOf("q"); qi.Depth != 1 || qi.Bytes != 5 || h.e.CellBytes() != 5 {
		t.Fatalf("after refused push depth=%d bytes=%d cell=%d, want 1, 5, 5", qi.Depth, qi.Bytes, h.e.CellBytes())
	}
}

// spec (push): messages: at most 10,000 per call (400 beyond, nothing appended).
func TestPushOver10000MessagesIsBadRequest(t *testing.T) {
	h := newHarness(t, nil)
	n, err := h.e.Push("default", "q", "", make([][]byte, MaxBatch+1))
	if n != 0 || CodeOf(err) != CodeBadRequest {
		t.Fatalf("push of 10,001: n=%d err=%v, want bad request", n, err)
	}
	if h.listed("q") && h.infoOf("q").Depth != 0 {
		t.Fatalf("a refused push appended %d", h.infoOf("q").Depth)
	}
}

// spec (push): exactly 10,000 messages in one call are accepted (and fill the
// default maxLength of 10,000 exactly, which D7 admits).
func TestPushOfExactly10000MessagesIsAccepted(t *testing.T) {
	h := newHarness(t, nil)
	n, err := h.e.Push("default", "q", "", payloads(numbered("m", MaxBatch)...))
	if n != MaxBatch || err != nil {
		t.Fatalf("push of 10,000: n=%d err=%v", n, err)
	}
	if d := h.infoOf("q").Depth; d != MaxBatch {
		t.Fatalf("depth %d, want 10000", d)
	}
}

// spec (push): an empty messages array is pushed: 0, not an error.
func TestPushEmptyMessagesPushesZero(t *testing.T) {
	h := newHarness(t, nil)
	n, err := h.e.Push("default", "q", "p", nil)
	if n != 0 || err != nil {
		t.Fatalf("empty push: n=%d err=%v, want 0 and no error", n, err)
	}
}

// spec (push): partition defaults to Default.
func TestPushWithoutPartitionGoesToDefault(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "x")
	d := h.depthOf("q", "")
	if len(d.Partitions) != 1 || d.Partitions[0].Partition != "Default" || d.Partitions[0].Pending != 1 {
		t.Fatalf("partitions %+v, want one Default partition with 1 pending", d.Partitions)
	}
	ms := h.pop(PopRequest{Queue: "q", Partition: "Default", Group: "g"})
	if len(ms) != 1 || ms[0].Partition != "Default" || ms[0].ID != "e:abcdef123456:Default:0" {
		t.Fatalf("popped %+v, want x from Default", ms)
	}
}

// spec (push): FIFO is per (queue, partition), across push calls.
func TestPushIsFIFOPerPartition(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "a", "a1", "a2")
	h.push("q", "b", "b1")
	h.push("q", "a", "a3", "a4")
	h.push("q", "b", "b2", "b3")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "a", Group: "g", Batch: 10})); got != "a1,a2,a3,a4" {
		t.Fatalf("partition a delivered %q", got)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "b", Group: "g", Batch: 10})); got != "b1,b2,b3" {
		t.Fatalf("partition b delivered %q", got)
	}
}

// D7: every bound refuses the push that would pass it (maxLength, reject).
func TestRejectRefusesPushThatWouldPassMaxLength(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 3, Policy: PolicyReject}))
	h.push("q", "", "a", "b")
	if _, err := h.pushErr("q", "", "c", "d"); CodeOf(err) != CodeQueueFull {
		t.Fatalf("push of 2 into room for 1: err=%v, want queue_full", err)
	}
	h.push("q", "", "c") // fills exactly
	if _, err := h.pushErr("q", "", "d"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("push into a full queue: err=%v, want queue_full", err)
	}
	if qi := h.infoOf("q"); qi.Depth != 3 || qi.Drops.Bounds != 0 {
		t.Fatalf("depth=%d bounds drops=%d, want 3 and 0 (reject drops nothing)", qi.Depth, qi.Drops.Bounds)
	}
}

// D7: filling a bound exactly is admitted (maxLength and maxBytes).
func TestFillingABoundExactlyIsAdmitted(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("len", declare(HasMaxLength, Options{MaxLength: 3}))
	if n, err := h.pushErr("len", "", "a", "b", "c"); n != 3 || err != nil {
		t.Fatalf("exact maxLength fill: n=%d err=%v", n, err)
	}
	h.configure("bytes", declare(HasMaxBytes, Options{MaxBytes: 10}))
	if n, err := h.pushErr("bytes", "", "12345", "67890"); n != 2 || err != nil {
		t.Fatalf("exact maxBytes fill: n=%d err=%v", n, err)
	}
	if qi := h.infoOf("bytes"); qi.Bytes != 10 {
		t.Fatalf("bytes %d, want 10", qi.Bytes)
	}
}

// D7: maxBytes refuses the push that would pass it under reject.
func TestRejectRefusesPushThatWouldPassMaxBytes(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxBytes, Options{MaxBytes: 10}))
	h.push("q", "", "123456789")
	if _, err := h.pushErr("q", "", "ab"); CodeOf(err) != CodeQueueFull {
		t.Fatalf("push of 2 bytes into room for 1: err=%v", err)
	}
	h.push("q", "", "a")
	if qi := h.infoOf("q"); qi.Bytes != 10 || qi.Depth != 2 {
		t.Fatalf("bytes=%d depth=%d, want 10 and 2", qi.Bytes, qi.Depth)
	}
}

// engine.md (bounds): maxLength and maxBytes bound the queue, all partitions together.
func TestQueueBoundsCountEveryPartition(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 2}))
	h.push("q", "a", "x")
	h.push("q", "b", "y")
	if _, err := h.pushErr("q", "c", "z"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third message across partitions: %v, want queue_full", err)
	}
}

// spec (bounds): dropOldest admits the push and drops from the head, counted under bounds.
func TestDropOldestAdmitsPushAndDropsFromTheHead(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 3, Policy: PolicyDropOldest}))
	h.push("q", "", "a", "b", "c")
	if n, err := h.pushErr("q", "", "d", "e"); n != 2 || err != nil {
		t.Fatalf("dropOldest push: n=%d err=%v, want 2 admitted", n, err)
	}
	qi := h.infoOf("q")
	if qi.Depth != 3 || qi.Drops.Bounds != 2 || h.e.Drops(CauseBounds) != 2 {
		t.Fatalf("depth=%d bounds=%d broker bounds=%d, want 3, 2, 2", qi.Depth, qi.Drops.Bounds, h.e.Drops(CauseBounds))
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "c,d,e" {
		t.Fatalf("popped %q, want c,d,e", got)
	}
}

// engine.md (bounds): a dropOldest push larger than the bound keeps its newest messages.
func TestDropOldestPushLargerThanBoundKeepsNewest(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 3, Policy: PolicyDropOldest}))
	if n, err := h.pushErr("q", "", "1", "2", "3", "4", "5"); n != 5 || err != nil {
		t.Fatalf("push of 5 into maxLength 3: n=%d err=%v", n, err)
	}
	if qi := h.infoOf("q"); qi.Depth != 3 || qi.Drops.Bounds != 2 {
		t.Fatalf("depth=%d bounds=%d, want 3 and 2", qi.Depth, qi.Drops.Bounds)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "3,4,5" {
		t.Fatalf("popped %q, want 3,4,5", got)
	}
}

// spec (bounds): dropOldest applies to maxBytes too.
func TestDropOldestOnMaxBytesDropsFromTheHead(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxBytes|HasPolicy, Options{MaxBytes: 10, Policy: PolicyDropOldest}))
	h.push("q", "", "aaaaa", "bbbbb")
	h.push("q", "", "cccc")
	qi := h.infoOf("q")
	if qi.Bytes != 9 || qi.Depth != 2 || qi.Drops.Bounds != 1 {
		t.Fatalf("bytes=%d depth=%d bounds=%d, want 9, 2, 1", qi.Bytes, qi.Depth, qi.Drops.Bounds)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "bbbbb,cccc" {
		t.Fatalf("popped %q", got)
	}
}

// D5, engine.md (a push that can never fit): a message bigger than maxBytes is a 400 naming the bound under
// either policy, and appends nothing; under dropOldest it is no longer admitted and dropped.
func TestMessageBiggerThanMaxBytesIsBadRequestUnderEitherPolicy(t *testing.T) {
	for _, policy := range []Policy{PolicyReject, PolicyDropOldest} {
		h := newHarness(t, nil)
		h.configure("q", declare(HasMaxBytes|HasPolicy, Options{MaxBytes: 4, Policy: policy}))
		h.push("q", "", "1234")
		n, err := h.pushErr("q", "", "x", "12345")
		const want = "a message of 5 bytes can never fit queue q's maxBytes 4"
		if n != 0 || CodeOf(err) != CodeBadRequest || err.Error() != want {
			t.Fatalf("%s: oversized push: n=%d err=%v, want 400 %q", policy, n, err, want)
		}
		qi := h.infoOf("q")
		if qi.Depth != 1 || qi.Bytes != 4 || qi.Drops.Bounds != 0 {
			t.Fatalf("%s: depth=%d bytes=%d bounds=%d, want the queue unchanged (1, 4, 0)", policy, qi.Depth, qi.Bytes, qi.Drops.Bounds)
		}
	}
}

// engine.md (a push that can never fit): under reject, a batch that passes
// maxLength or maxBytes only as a whole is a 429 queue_full, not a 400 (a
// client's buffered push splits it until its parts fit), and appends
// nothing; filling a bound exactly is admitted.
func TestRejectBatchOverABoundIsQueueFull(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxBytes|HasMaxLength, Options{MaxBytes: 6, MaxLength: 3}))
	for _, ps := range [][]string{{"a", "b", "c", "d"}, {"abcd", "efg"}} {
		if n, err := h.pushErr("q", "", ps...); n != 0 || err != ErrQueueFull {
			t.Fatalf("push %v: n=%d err=%v, want queue_full", ps, n, err)
		}
	}
	h.push("q", "", "ab", "cd", "ef")
	if n, err := h.pushErr("q", "", "g"); n != 0 || err != ErrQueueFull {
		t.Fatalf("push into a full queue: n=%d err=%v, want queue_full", n, err)
	}
}

// engine.md (bounds): dropOldest drops the pushed partition's head first, then the push's own oldest.
func TestDropOldestDropsPushedPartitionHeadThenPushOwnOldest(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 2, Policy: PolicyDropOldest}))
	h.push("q", "a", "a1")
	h.push("q", "b", "b1")
	h.push("q", "b", "b2", "b3")
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "a", Group: "g", Batch: 10})); got != "a1" {
		t.Fatalf("partition a holds %q, want a1 (another partition is dropped only last)", got)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "b", Group: "g", Batch: 10})); got != "b3" {
		t.Fatalf("partition b holds %q, want b3", got)
	}
	if b := h.infoOf("q").Drops.Bounds; b != 2 {
		t.Fatalf("bounds drops %d, want 2", b)
	}
}

// engine.md (bounds): when the pushed partition and the push cannot make the
// room, the heads of the other partitions are dropped, counted under bounds.
func TestDropOldestTrimsOtherPartitionsWhenStillOver(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 4, Policy: PolicyDropOldest}))
	h.push("q", "a", "a1", "a2", "a3", "a4")
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 2, Policy: PolicyDropOldest}))
	h.push("q", "b", "b1")
	qi := h.infoOf("q")
	if qi.Depth != 2 || qi.Drops.Bounds != 3 {
		t.Fatalf("depth=%d bounds=%d, want 2 and 3", qi.Depth, qi.Drops.Bounds)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "a", Group: "g", Batch: 10})); got != "a3,a4" {
		t.Fatalf("partition a holds %q, want a3,a4", got)
	}
}

// engine.md (bounds): lowering a bound by configure drops nothing held; it applies to the next push.
func TestLoweringABoundKeepsWhatIsHeld(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 4}))
	h.push("q", "", "a", "b", "c", "d")
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 2}))
	if qi := h.infoOf("q"); qi.Depth != 4 || qi.Drops.Bounds != 0 {
		t.Fatalf("depth=%d bounds=%d after lowering the bound, want 4 and 0", qi.Depth, qi.Drops.Bounds)
	}
	if _, err := h.pushErr("q", "", "e"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("next push: %v, want queue_full", err)
	}
}

// D7 / D14: the tenant byte allowance refuses the push that would pass it (403 quota), filling it exactly is admitted.
func TestTenantByteAllowanceRefusesPushThatWouldPassIt(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.e.SetTenantLimits("default", 10, 0)
	h.push("q1", "", "123456")
	h.push("q2", "", "7890") // exactly 10, across queues
	if _, err := h.pushErr("q1", "", "x"); !errors.Is(err, ErrTenantBytes) || CodeOf(err) != CodeQuotaExceeded {
		t.Fatalf("push past the allowance: err=%v, want ephemeral_quota_exceeded", err)
	}
	if n, err := h.e.Push("other", "q1", "", payloads("a much longer payload")); n != 1 || err != nil {
		t.Fatalf("another tenant is not bound by it: n=%d err=%v", n, err)
	}
	h.e.SetTenantLimits("default", 0, 0) // 0 = unlimited
	if _, err := h.pushErr("q1", "", "x"); err != nil {
		t.Fatalf("unlimited tenant refused: %v", err)
	}
}

// D14: the queue allowance refuses the queue creation (by push, pop or configure) that would pass it.
func TestTenantQueueAllowanceRefusesQueueCreation(t *testing.T) {
	h := newHarness(t, nil)
	h.e.SetTenantLimits("default", 0, 2)
	h.push("q1", "", "a")
	h.pop(PopRequest{Queue: "q2"})
	if _, err := h.pushErr("q3", "", "a"); !errors.Is(err, ErrTenantQueues) || CodeOf(err) != CodeQuotaExceeded {
		t.Fatalf("push creating a third queue: %v, want quota exceeded", err)
	}
	if _, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "q3"}, &collector{}); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("pop creating a third queue: %v", err)
	}
	if err := h.e.Configure("default", "q3", OptionSet{}); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("configure creating a third queue: %v", err)
	}
	if h.listed("q3") {
		t.Fatalf("a refused creation left q3 in the listing")
	}
	h.push("q1", "", "b") // existing queues are unaffected
	if existed, _ := h.e.Delete("default", "q1"); !existed {
		t.Fatal("delete q1")
	}
	h.push("q3", "", "a") // room again
}

// D7: the broker total (QUEEN_EPHEMERAL_MAX_BYTES) refuses with 503 ephemeral_unavailable; exact fill admitted.
func TestBrokerTotalRefusesWithUnavailable(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 100 })
	if _, err := h.e.Push("a", "q", "", payloads(strings.Repeat("x", 60))); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Push("b", "q", "", payloads(strings.Repeat("y", 40))); err != nil {
		t.Fatalf("exact fill of the broker total: %v", err)
	}
	if _, err := h.e.Push("b", "q", "", payloads("z")); !errors.Is(err, ErrBrokerFull) || CodeOf(err) != CodeUnavailable {
		t.Fatalf("push past the broker total: err=%v, want ephemeral_unavailable", err)
	}
	if h.e.CellBytes() != 100 {
		t.Fatalf("cell bytes %d, want 100", h.e.CellBytes())
	}
}

// spec (bounds) + D7: budgets are checked from the narrowest outwards; the first to refuse is the answer.
func TestRefusalOrderQueueThenTenantThenBroker(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 100 })
	h.e.SetTenantLimits("default", 30, 0)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 1}))
	h.push("q", "", strings.Repeat("x", 30)) // tenant at its allowance
	if _, err := h.e.Push("other", "q", "", payloads(strings.Repeat("y", 70))); err != nil {
		t.Fatal(err) // broker at its total
	}
	if _, err := h.pushErr("q", "", "z"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("all three refuse: %v, want the queue's own bound first", err)
	}
	if _, err := h.pushErr("q2", "", "z"); !errors.Is(err, ErrTenantBytes) {
		t.Fatalf("tenant and broker refuse: %v, want the tenant allowance", err)
	}
	if _, err := h.e.Push("other", "q2", "", payloads("z")); !errors.Is(err, ErrBrokerFull) {
		t.Fatalf("only the broker refuses: %v, want the broker total", err)
	}
}

// D3: a queue's reclaimable messages are freed to make room before its bound policy applies.
func TestQueueReclaimsConsumedMessagesBeforeRejecting(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 3}))
	h.push("q", "", "a", "b", "c")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g", Batch: 3})...)
	if n, err := h.pushErr("q", "", "d", "e", "f"); n != 3 || err != nil {
		t.Fatalf("push into a queue full of consumed messages: n=%d err=%v, want admitted", n, err)
	}
	qi := h.infoOf("q")
	if qi.Depth != 3 || qi.Bytes != 3 || qi.Drops.Bounds != 0 {
		t.Fatalf("depth=%d bytes=%d bounds=%d, want 3, 3, 0", qi.Depth, qi.Bytes, qi.Drops.Bounds)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "d,e,f" {
		t.Fatalf("g popped %q", got)
	}
}

// D3: under dropOldest, reclaimable messages make the room first, so no pending message is dropped.
func TestDropOldestFreesReclaimableBeforeDroppingPending(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 3, Policy: PolicyDropOldest}))
	h.push("q", "", "a", "b", "c")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2})...) // a, b reclaimable
	h.push("q", "", "d", "e")
	if qi := h.infoOf("q"); qi.Drops.Bounds != 0 || qi.Depth != 3 {
		t.Fatalf("bounds=%d depth=%d, want 0 and 3 (only consumed messages freed)", qi.Drops.Bounds, qi.Depth)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "c,d,e" {
		t.Fatalf("g popped %q", got)
	}
}

// D3: the broker never refuses with 503 while reclaimable bytes could make the room.
func TestBrokerReclaimsConsumedMessagesBeforeRefusing(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 100 })
	if _, err := h.e.Push("a", "q", "", payloads(strings.Repeat("x", 60))); err != nil {
		t.Fatal(err)
	}
	c := &collector{e: h.e}
	if n, _, err := h.e.Pop(&PopRequest{Tenant: "a", Queue: "q", Group: "g"}, c); n != 1 || err != nil {
		t.Fatalf("pop: %d %v", n, err)
	}
	if out, _ := h.e.Ack("a", "q", "g", []AckItem{{ID: []byte(c.msgs[0].ID)}}, nil); outcomes(out) != "[acked]" {
		t.Fatalf("ack %v", out)
	}
	if n, err := h.e.Push("b", "q", "", payloads(strings.Repeat("y", 60))); n != 1 || err != nil {
		t.Fatalf("push that reclaimable bytes make room for: n=%d err=%v, want admitted", n, err)
	}
	if h.e.CellBytes() != 60 {
		t.Fatalf("cell bytes %d, want 60", h.e.CellBytes())
	}
}

// D3: the tenant allowance never refuses (403) while reclaimable bytes could make the room.
func TestTenantReclaimsConsumedMessagesBeforeRefusing(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.e.SetTenantLimits("default", 100, 0)
	h.push("q1", "", strings.Repeat("x", 60))
	h.ack("q1", "g", AckCompleted, h.pop(PopRequest{Queue: "q1", Group: "g"})...)
	if n, err := h.pushErr("q2", "", strings.Repeat("y", 60)); n != 1 || err != nil {
		t.Fatalf("push that reclaimable bytes make room for: n=%d err=%v, want admitted", n, err)
	}
	if b := h.infoOf("q1").Bytes; b != 0 {
		t.Fatalf("q1 still holds %d bytes", b)
	}
}

// D10: names are non-empty UTF-8 of at most 512 bytes with no control character; invalid is 400 on every verb.
func TestInvalidNamesAreBadRequestOnEveryVerb(t *testing.T) {
	h := newHarness(t, nil)
	bad := []string{
		strings.Repeat("n", 513), "a\x00b", "tab\there", "nl\n", "\x1f", "del\x7f", "c1\u0080", "nel\u0085", "c1\u009f", "bad\xffutf8",
	}
	for _, name := range append([]string{""}, bad...) {
		if _, err := h.e.Push("default", name, "", payloads("x")); CodeOf(err) != CodeBadRequest {
			t.Errorf("push queue %q: %v", name, err)
		}
		if _, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: name}, &collector{}); CodeOf(err) != CodeBadRequest {
			t.Errorf("pop queue %q: %v", name, err)
		}
		if _, err := h.e.Ack("default", name, "", nil, nil); CodeOf(err) != CodeBadRequest {
			t.Errorf("ack queue %q: %v", name, err)
		}
		if err := h.e.Configure("default", name, OptionSet{}); CodeOf(err) != CodeBadRequest {
			t.Errorf("configure queue %q: %v", name, err)
		}
		if _, err := h.e.Reset("default", name); CodeOf(err) != CodeBadRequest {
			t.Errorf("reset queue %q: %v", name, err)
		}
		if _, err := h.e.Delete("default", name); CodeOf(err) != CodeBadRequest {
			t.Errorf("delete queue %q: %v", name, err)
		}
		var d DepthInfo
		if err := h.e.Depth("default", name, "", &d); CodeOf(err) != CodeBadRequest {
			t.Errorf("depth queue %q: %v", name, err)
		}
	}
	h.push("q", "", "x")
	for _, name := range bad {
		if _, err := h.e.Push("default", "q", name, payloads("x")); CodeOf(err) != CodeBadRequest {
			t.Errorf("push partition %q: %v", name, err)
		}
		if _, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "q", Partition: name}, &collector{}); CodeOf(err) != CodeBadRequest {
			t.Errorf("pop partition %q: %v", name, err)
		}
		if _, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "q", Group: name}, &collector{}); CodeOf(err) != CodeBadRequest {
			t.Errorf("pop group %q: %v", name, err)
		}
		if _, err := h.e.Ack("default", "q", name, nil, nil); CodeOf(err) != CodeBadRequest {
			t.Errorf("ack group %q: %v", name, err)
		}
		var d DepthInfo
		if err := h.e.Depth("default", "q", name, &d); CodeOf(err) != CodeBadRequest {
			t.Errorf("depth group %q: %v", name, err)
		}
	}
	qs := h.e.Queues("default", nil)
	if len(qs) != 1 || qs[0].Name != "q" || qs[0].Depth != 1 || qs[0].Partitions != 1 || qs[0].Groups != 0 {
		t.Fatalf("refused calls changed state: %+v", qs)
	}
}

// D10: a name of exactly 512 bytes, and non-control Unicode, are valid everywhere.
func TestValidNamesUpTo512BytesAreAccepted(t *testing.T) {
	h := newHarness(t, nil)
	long := strings.Repeat("é", 256) // 512 bytes
	for _, name := range []string{long, "café ñ 日本", "nbsp\u00a0ok", "a:b:c"} {
		h.push(name, name, "x")
		ms := h.pop(PopRequest{Queue: name, Partition: name, Group: name})
		if len(ms) != 1 || ms[0].Partition != name {
			t.Fatalf("name %q: popped %+v", name, ms)
		}
		if got := outcomes(h.ack(name, name, AckCompleted, ms...)); got != "[acked]" {
			t.Fatalf("name %q: ack %s", name, got)
		}
		if d := h.depthOf(name, name); d.Queue != name {
			t.Fatalf("name %q: depth %+v", name, d)
		}
	}
}

// D10: payload bytes are stored and returned verbatim, whatever they hold.
func TestPayloadBytesAreReturnedVerbatim(t *testing.T) {
	h := newHarness(t, nil)
	in := []string{"null", "", `{"a":[1,2,{"b":"c"}]}`, "\x00\xff\xfe binary", `"str"`, strings.Repeat("z", 70000)}
	h.push("q", "", in...)
	ms := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})
	if len(ms) != len(in) {
		t.Fatalf("popped %d, want %d", len(ms), len(in))
	}
	for i := range in {
		if ms[i].Payload != in[i] {
			t.Fatalf("payload %d came back as %q, want %q", i, ms[i].Payload, in[i])
		}
	}
	var total int64
	for _, p := range in {
		total += int64(len(p))
	}
	if b := h.infoOf("q").Bytes; b != total {
		t.Fatalf("bytes %d, want the payload bytes %d", b, total)
	}
}

// spec (push) + engine Push doc: a refused push appends nothing, so it reports 0 pushed.
func TestRefusedPushReportsZeroPushed(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 100 })
	h.configure("full", declare(HasMaxLength, Options{MaxLength: 1}))
	h.push("full", "", "a")
	h.e.SetTenantLimits("small", 5, 0)
	if _, err := h.e.Push("big", "q", "", payloads(strings.Repeat("x", 90))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, tenant, queue string
		ps                  []string
		want                error
	}{
		{"bad request", "default", "q", numbered("m", MaxBatch+1), nil},
		{"queue_full", "default", "full", []string{"b"}, ErrQueueFull},
		{"quota", "small", "q", []string{"abc", "def"}, ErrTenantBytes},
		{"broker", "big", "q2", []string{"0123456789", "x"}, ErrBrokerFull},
	} {
		n, err := h.e.Push(c.tenant, c.queue, "", payloads(c.ps...))
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: err=%v, want %v", c.name, err, c.want)
		}
		if n != 0 {
			t.Errorf("%s: a refused push of %d reports %d pushed, want 0", c.name, len(c.ps), n)
		}
	}
}

// engine.md (bounds): the tenant allowance is checked on the bytes a push adds net of what dropOldest drops.
func TestTenantAllowanceCountsPushNetOfDropOldest(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.e.SetTenantLimits("default", 10, 0)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 2, Policy: PolicyDropOldest}))
	h.push("q", "", "aaaaa", "bbbbb")
	if n, err := h.pushErr("q", "", "ccccc"); n != 1 || err != nil {
		t.Fatalf("push replacing an equal-size message at the allowance: n=%d err=%v, want admitted", n, err)
	}
	if qi := h.infoOf("q"); qi.Bytes != 10 || qi.Drops.Bounds != 1 {
		t.Fatalf("bytes=%d bounds=%d, want 10 and 1", qi.Bytes, qi.Drops.Bounds)
	}
}

// D7: a dropOldest push refused by a budget above the queue is refused whole: it drops nothing either.
func TestRefusedDropOldestPushDropsNothing(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.e.SetTenantLimits("default", 10, 0)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 1, Policy: PolicyDropOldest}))
	h.push("q", "", "aaaaa")
	if _, err := h.pushErr("q", "", strings.Repeat("b", 12)); !errors.Is(err, ErrTenantBytes) {
		t.Fatalf("push whose net passes the allowance: %v", err)
	}
	qi := h.infoOf("q")
	if qi.Depth != 1 || qi.Bytes != 5 || qi.Drops.Bounds != 0 {
		t.Fatalf("after the refused push depth=%d bytes=%d bounds=%d, want a kept and nothing counted", qi.Depth, qi.Bytes, qi.Drops.Bounds)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g"})); got != "aaaaa" {
		t.Fatalf("popped %q", got)
	}
}

// D10: payloads of any size (larger than an arena segment too) are stored and returned verbatim.
func TestLargePayloadsAreReturnedVerbatim(t *testing.T) {
	h := newHarness(t, nil)
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var batch []string
	for i := 0; i < 100; i++ {
		batch = append(batch, strings.Repeat(string(rune('a'+i%26)), 20<<10))
	}
	h.push("q", "big", string(big))
	h.push("q", "many", batch...)
	if ms := h.pop(PopRequest{Queue: "q", Partition: "big", Group: "g"}); len(ms) != 1 || ms[0].Payload != string(big) {
		t.Fatal("a 3 MiB payload did not come back verbatim")
	}
	ms := h.pop(PopRequest{Queue: "q", Partition: "many", Group: "g", Batch: 100})
	if len(ms) != 100 {
		t.Fatalf("popped %d of 100", len(ms))
	}
	for i := range ms {
		if ms[i].Payload != batch[i] {
			t.Fatalf("payload %d differs", i)
		}
	}
	if b := h.infoOf("q").Bytes; b != int64(len(big))+100*(20<<10) {
		t.Fatalf("bytes %d", b)
	}
}

// spec (push): an empty messages array is pushed: 0 and not a refusal, even when the queue is over a
// bound lowered by configure (D7: a bound refuses the push that would pass it; an empty push passes nothing).
func TestEmptyPushIntoQueueOverALoweredBoundIsAccepted(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 4}))
	h.push("q", "", "a", "b", "c", "d")
	if n, err := h.pushErr("q", ""); n != 0 || err != nil {
		t.Fatalf("empty push into an exactly full queue: n=%d err=%v", n, err)
	}
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 2}))
	if n, err := h.pushErr("q", ""); n != 0 || err != nil {
		t.Fatalf("empty push into a queue over its lowered bound: n=%d err=%v, want pushed 0", n, err)
	}
}

// D7: the tenant's allowance answers before the broker total. A push that
// would create a queue past both the queue allowance and the broker total is
// refused for the allowance (403), as pop and configure are.
func TestQueueAllowanceAnswersBeforeTheBrokerTotal(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxBytes = 1024 })
	h.e.SetTenantLimits("default", 0, 1)
	h.push("one", "", "a")
	big := string(make([]byte, 900)) // passes the broker total too
	if _, err := h.pushErr("two", "", big); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("push creating a second queue past both: %v, want the queue allowance", err)
	}
	if _, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "two"}, &collector{}); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("pop creating a second queue: %v, want the queue allowance", err)
	}
}

// D7: an empty push passes no bound: it makes its partition even when the
// queue is over a bound lowered below what it holds.
func TestEmptyPushToOverfullQueueMakesItsPartition(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b")
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 1}))
	if n, err := h.pushErr("q", "p2"); err != nil || n != 0 {
		t.Fatalf("empty push: n=%d err=%v, want 0 and no refusal", n, err)
	}
	if qi := h.infoOf("q"); qi.Partitions != 2 {
		t.Fatalf("%d partitions, want p2 made", qi.Partitions)
	}
}

// D7: under dropOldest on maxBytes, a push drops exactly the oldest messages
// that make its room, counting each one's own size: no more once the queue
// fits exactly, from the partition's head first, then the push's own oldest.
func TestDropOldestOnMaxBytesDropsExactlyTheRoom(t *testing.T) {
	bytesBound := func(n int64) OptionSet {
		return declare(HasPolicy|HasMaxBytes, Options{Policy: PolicyDropOldest, MaxBytes: n})
	}
	held := func(h *harness) string {
		return payloadsOf(h.pop(PopRequest{Queue: "q", Group: "check", Batch: 100, AutoAck: true}))
	}
	h := newHarness(t, nil)
	h.configure("q", bytesBound(4))
	h.push("q", "p", "ab", "cd")
	h.push("q", "p", "ef") // over by 2: ab goes, and the queue fits exactly
	if got := held(h); got != "cd,ef" {
		t.Fatalf("held %q, want cd,ef", got)
	}

	h = newHarness(t, nil)
	h.configure("q", bytesBound(2))
	h.push("q", "p", "ab", "cd") // over by 2 with nothing held: the push's own ab goes
	if got := held(h); got != "cd" {
		t.Fatalf("held %q, want cd", got)
	}

	// Sizes counted slot by slot, in a full ring whose seqs do not start at 0.
	h = newHarness(t, nil)
	h.push("gone", "p", "x")
	h.e.Delete("default", "gone") // later partitions start above its seqs
	h.configure("q", bytesBound(7))
	h.push("q", "p", "a", "b", "c", "dddd") // a ring of 4, full
	h.push("q", "p", "eee")                 // over by 3: a, b and c go
	if got := held(h); got != "dddd,eee" {
		t.Fatalf("held %q, want dddd,eee", got)
	}
}

// D7: a dropOldest push that drops held messages and some of its own is
// checked against the tenant's allowance net of both.
func TestDropOldestPushIsCreditedBothDrops(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasPolicy|HasMaxBytes, Options{Policy: PolicyDropOldest, MaxBytes: 2}))
	h.push("q", "p", "a", "b")
	h.push("q", "p", "c") // a ring of 4 holding b, c
	h.e.SetTenantLimits("default", h.e.CellBytes(), 0)
	if n, err := h.pushErr("q", "p", "dd", "ee"); err != nil || n != 2 {
		t.Fatalf("a push adding as much as it drops: n=%d err=%v, want admitted", n, err)
	}
	if qi := h.infoOf("q"); qi.Depth != 1 || qi.Bytes != 2 {
		t.Fatalf("depth %d bytes %d, want ee alone", qi.Depth, qi.Bytes)
	}
}

// D3, D7: a push that fills maxBytes exactly frees no reclaimable message.
func TestPushFillingTheBoundExactlyKeepsReclaimable(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxBytes, Options{MaxBytes: 4}))
	h.push("q", "p", "ab")
	h.pop(PopRequest{Queue: "q", Group: "g", AutoAck: true}) // ab reclaimable
	h.push("q", "p", "cd")
	if b := h.infoOf("q").Bytes; b != 4 {
		t.Fatalf("queue bytes %d, want 4: the reclaimable ab kept", b)
	}
}

// D7: when the other partitions alone are over maxBytes (a bound lowered by
// configure), a dropOldest push trims their heads too.
func TestDropOldestTrimsOtherPartitionsOverMaxBytes(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "aaaa", "bbbb")
	h.configure("q", declare(HasPolicy|HasMaxBytes, Options{Policy: PolicyDropOldest, MaxBytes: 4}))
	h.push("q", "p2", "c")
	if qi := h.infoOf("q"); qi.Bytes != 4 || qi.Drops.Bounds != 2 {
		t.Fatalf("bytes %d bounds drops %d, want 4 (bbbb) and 2 (c, aaaa)", qi.Bytes, qi.Drops.Bounds)
	}
}

// D3, D7: a push over maxBytes frees reclaimable messages from the head only
// until it fits: the reclaimable message after them is kept.
func TestPushFreesOnlyTheReclaimableRoomItNeeds(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxBytes, Options{MaxBytes: 4}))
	h.push("q", "p", "ab", "cd")
	h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2, AutoAck: true}) // both reclaimable
	h.push("q", "p", "xy")
	if b := h.infoOf("q").Bytes; b != 4 {
		t.Fatalf("queue bytes %d, want 4: ab freed, the reclaimable cd kept", b)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "late", Batch: 10})); got != "cd,xy" {
		t.Fatalf("a new group reads %q, want cd,xy", got)
	}
}

// engine.md (bounds): when a dropOldest push leaves the queue over a bound
// (lowered by configure), the heads of the other partitions are trimmed in
// turn, onwards from where the previous trim stopped (at first the first
// partition), until the queue fits.
func TestDropOldestTrimsOtherPartitionsInTurn(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 10, Policy: PolicyDropOldest}))
	for _, p := range []string{"a", "b", "c", "d"} {
		h.push("q", p, p+"1")
	}
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 1, Policy: PolicyDropOldest}))
	h.push("q", "d", "d2") // d1 and d2 dropped, then a1 and b1
	if qi := h.infoOf("q"); qi.Depth != 1 || qi.Drops.Bounds != 4 {
		t.Fatalf("depth=%d bounds=%d, want 1 and 4", qi.Depth, qi.Drops.Bounds)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", AutoAck: true, Batch: 10})); got != "c1" {
		t.Fatalf("the queue holds %q, want c1", got)
	}
	// The next trim starts where this one stopped, at b: with a2, b2 and
	// c2 held over a bound of 1, it drops b2 and c2 and keeps a2.
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 10, Policy: PolicyDropOldest}))
	for _, p := range []string{"a", "b", "c"} {
		h.push("q", p, p+"2")
	}
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 1, Policy: PolicyDropOldest}))
	h.push("q", "d", "d3") // d3 dropped, then b2 and c2
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})); got != "a2" {
		t.Fatalf("after the second trim the queue holds %q, want a2", got)
	}
}
