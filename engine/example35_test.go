package engine

import "testing"

// TestExample35Flow runs the spec's examples/35-ephemeral-basics.js at the
// engine level: configure, push two, list, depth, pop with a group, ack,
// a second group sees both, reset, delete.
func TestExample35Flow(t *testing.T) {
	h := newHarness(t, nil)
	e := h.e
	err := e.Configure("default", "presence", OptionSet{
		Has:     HasMaxLength | HasMaxBytes | HasPolicy | HasTTLSeconds | HasLeaseSeconds | HasRetryLimit,
		Options: Options{MaxLength: 1000, MaxBytes: 1 << 20, Policy: PolicyDropOldest, TTLSeconds: 30, LeaseSeconds: 15, RetryLimit: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.push("presence", "room-7", `{"user":"alice","typing":true}`, `{"user":"bob","typing":true}`)

	qs := e.Queues("default", nil)
	if len(qs) != 1 || qs[0].Name != "presence" || !qs[0].Declared || qs[0].Depth != 2 || qs[0].Partitions != 1 {
		t.Fatalf("listing: %+v", qs)
	}
	var d DepthInfo
	if err := e.Depth("default", "presence", "", &d); err != nil || d.Pending != 2 || d.PartitionsPending != 1 {
		t.Fatalf("depth: %+v %v", d, err)
	}

	msgs := h.pop(PopRequest{Queue: "presence", Partition: "room-7", Group: "widget", Batch: 10, Wait: true})
	if payloadsOf(msgs) != `{"user":"alice","typing":true},{"user":"bob","typing":true}` {
		t.Fatalf("popped %q", payloadsOf(msgs))
	}
	if msgs[0].Attempts != 0 || msgs[0].ID != "e:abcdef123456:room-7:0" {
		t.Fatalf("first message %+v", msgs[0])
	}
	if got := outcomes(h.ack("presence", "widget", AckCompleted, msgs...)); got != "[acked acked]" {
		t.Fatalf("outcomes %s", got)
	}
	audit := h.pop(PopRequest{Queue: "presence", Partition: "room-7", Group: "audit", Batch: 10})
	if len(audit) != 2 {
		t.Fatalf("the audit group saw %d", len(audit))
	}
	dropped, _ := e.Reset("default", "presence")
	if dropped != 2 {
		t.Fatalf("reset dropped %d", dropped)
	}
	existed, _ := e.Delete("default", "presence")
	if !existed || len(e.Queues("default", nil)) != 0 {
		t.Fatalf("delete: existed=%v listing=%v", existed, e.Queues("default", nil))
	}
	if e.CellBytes() != 0 {
		t.Fatalf("cell bytes %d after delete", e.CellBytes())
	}
}
