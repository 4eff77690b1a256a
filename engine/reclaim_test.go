package engine

import (
	"fmt"
	"sync"
	"testing"
)

// reclaimersOf lists the queue names in a tenant's reclaimers set.
func reclaimersOf(e *Engine, tenant string) map[string]bool {
	out := map[string]bool{}
	e.tenant(tenant).reclaimers.each(func(q *Queue) { out[q.name] = true })
	return out
}

// The set a reclaim pass visits holds the queues with reclaimable messages
// and no other: a queue joins when a group settles past messages, leaves
// when a pass frees them, and leaves when it is deleted.
func TestReclaimersAreTheQueuesHoldingReclaimable(t *testing.T) {
	h := newHarness(t, nil)
	h.push("pending", "", "a")
	h.push("consumed", "p", "b")
	h.push("deleted", "", "c")
	if got := reclaimersOf(h.e, "default"); len(got) != 0 {
		t.Fatalf("reclaimers before any ack: %v, want none", got)
	}
	h.pop(PopRequest{Queue: "consumed", Partition: "p", Group: "g", AutoAck: true})
	h.pop(PopRequest{Queue: "deleted", Group: "g", AutoAck: true})
	if got := reclaimersOf(h.e, "default"); len(got) != 2 || !got["consumed"] || !got["deleted"] {
		t.Fatalf("reclaimers after two queues were consumed: %v, want consumed and deleted", got)
	}
	h.e.Delete("default", "deleted")
	if got := reclaimersOf(h.e, "default"); len(got) != 1 || !got["consumed"] {
		t.Fatalf("reclaimers after a delete: %v, want consumed alone", got)
	}

	// A push that does not fit the broker frees the reclaimable message
	// before it is refused, and the pass empties the set.
	h.e.cfg.MaxBytes = h.e.CellBytes()
	if _, err := h.pushErr("new", "", "d"); err != ErrBrokerFull {
		t.Fatalf("push past the total: %v, want ErrBrokerFull", err)
	}
	if b := h.infoOf("consumed").Bytes; b != 0 {
		t.Fatalf("consumed holds %d bytes after the refusal, want its reclaimable message freed (D3)", b)
	}
	if b := h.infoOf("pending").Bytes; b != 1 {
		t.Fatalf("pending holds %d bytes after the refusal, want its pending message kept", b)
	}
	if got := reclaimersOf(h.e, "default"); len(got) != 0 {
		t.Fatalf("reclaimers after the pass: %v, want none", got)
	}

	// It joins again on its next settle.
	h.e.cfg.MaxBytes = 1 << 30
	h.push("consumed", "p", "e")
	h.pop(PopRequest{Queue: "consumed", Partition: "p", Group: "g", AutoAck: true})
	if got := reclaimersOf(h.e, "default"); !got["consumed"] {
		t.Fatalf("reclaimers after a second ack: %v, want consumed", got)
	}
}

// A tenant's allowance frees that tenant's reclaimable messages, found
// through its own set, and leaves another tenant's alone.
func TestTenantRefusalReclaimsThroughItsOwnSet(t *testing.T) {
	h := newHarness(t, payloadOnly)
	for _, tn := range []string{"a", "b"} {
		h.e.Push(tn, "q", "", payloads("1234"))
		h.e.Pop(&PopRequest{Tenant: tn, Queue: "q", Group: "g", Batch: 1, AutoAck: true}, &collector{})
	}
	h.e.SetTenantLimits("a", 6, 0)
	if _, err := h.e.Push("a", "q2", "", payloads("12345")); err != nil {
		t.Fatalf("push that fits once a's reclaimable bytes are freed: %v", err)
	}
	if got := reclaimersOf(h.e, "a"); len(got) != 0 {
		t.Fatalf("a's reclaimers after its pass: %v, want none", got)
	}
	if got := reclaimersOf(h.e, "b"); !got["q"] {
		t.Fatalf("b's reclaimers: %v, want q untouched by a's pass", got)
	}
}

// Under concurrent acks and passes no queue holding reclaimable messages is
// left out of the set (the invariant in reclaim.go): after the storm, a
// pass frees every reclaimable byte.
func TestReclaimersKeepUpWithConcurrentAcks(t *testing.T) {
	h := newHarness(t, nil)
	const queues, rounds = 8, 300
	var wg sync.WaitGroup
	for i := range queues {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			for range rounds {
				h.e.Push("default", name, "", payloads("xy"))
				h.e.Pop(&PopRequest{Tenant: "default", Queue: name, Group: "g", Batch: 1, AutoAck: true}, &collector{})
			}
		}(fmt.Sprintf("q%d", i))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			h.e.tenant("default").reclaimAll()
		}
	}()
	wg.Wait()
	h.e.tenant("default").reclaimAll()
	if r := h.e.reclaimableBytes.Load(); r != 0 {
		t.Fatalf("reclaimable bytes after a final pass: %d, want 0 (a queue fell out of the set)", r)
	}
}

// D3: a reclaim pass frees a partition's reclaimable messages and nothing
// above the reclaim point, also in a partition whose head has moved on
// (messages freed before): the pending message after them stays.
func TestReclaimPassFreesOnlyWhatIsBelowThePoint(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.e.SetTenantLimits("default", 6, 0)
	h.push("q1", "p", "a", "b")
	h.pop(PopRequest{Queue: "q1", Group: "g", Batch: 2, AutoAck: true})
	h.push("q2", "", "xxxxx") // 7 > 6: a and b freed, q1's head moves on
	if _, err := h.e.Delete("default", "q2"); err != nil {
		t.Fatal(err)
	}
	h.push("q1", "p", "c", "d")
	h.pop(PopRequest{Queue: "q1", Group: "g", AutoAck: true}) // c reclaimable, d pending
	h.push("q3", "", "yyyyy")                                 // 7 > 6: c freed
	if fp := tenantFootprint(h.e, "default"); fp != 6 {
		t.Fatalf("tenant footprint %d, want 6: d and yyyyy", fp)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q1", Group: "g", Batch: 10})); got != "d" {
		t.Fatalf("q1 gives g %q, want the pending d", got)
	}
}

// A queue joins the set only when its reclaim point moves up past messages:
// a bounds drop of pending messages, after which the point sits at the new
// head with nothing below it held, makes nothing reclaimable and joins
// nothing.
func TestDroppingPendingMessagesJoinsNoSet(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy, Options{MaxLength: 1, Policy: PolicyDropOldest}))
	h.pop(PopRequest{Queue: "q", Group: "g"}) // g exists, at the start
	h.push("q", "", "a")
	h.push("q", "", "b") // a dropped unread
	if qi := h.infoOf("q"); qi.Depth != 1 || qi.Drops.Bounds != 1 {
		t.Fatalf("depth %d, bounds drops %d; want 1 and 1", qi.Depth, qi.Drops.Bounds)
	}
	if got := reclaimersOf(h.e, "default"); len(got) != 0 {
		t.Fatalf("reclaimers after a drop of pending messages: %v, want none", got)
	}
}
