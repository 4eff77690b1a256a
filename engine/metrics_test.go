package engine

import "testing"

type gauges struct {
	bytes              int64
	declared, implicit int
	parked             int64
}

func readGauges(e *Engine) map[string]gauges {
	out := map[string]gauges{}
	e.TenantGauges(func(tenant string, bytes int64, declared, implicit int, parked int64) {
		out[tenant] = gauges{bytes, declared, implicit, parked}
	})
	return out
}

// TenantGauges reads each tenant's bytes, queues by tier and parked pops;
// a deleted queue no longer counts.
func TestTenantGauges(t *testing.T) {
	h := newHarness(t, payloadOnly)
	must(t, h.e.Configure("a", "decl", OptionSet{}))
	if _, err := h.e.Push("a", "imp", "p", payloads("12345", "678")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Push("b", "imp", "p", payloads("xy")); err != nil {
		t.Fatal(err)
	}
	h.park(PopRequest{Tenant: "a", Queue: "decl", Group: "g"})
	h.park(PopRequest{Tenant: "a", Queue: "decl", Group: "h"})

	got := readGauges(h.e)
	want := map[string]gauges{
		"a": {bytes: 8, declared: 1, implicit: 1, parked: 2},
		"b": {bytes: 2, declared: 0, implicit: 1, parked: 0},
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("tenant %s: got %+v, want %+v (all %+v)", k, got[k], w, got)
		}
	}
	if got["a"].bytes+got["b"].bytes != h.e.CellBytes() {
		t.Fatalf("tenant bytes %+v do not add up to the cell's %d", got, h.e.CellBytes())
	}

	h.e.ReleaseWaiters()
	if _, err := h.e.Delete("b", "imp"); err != nil {
		t.Fatal(err)
	}
	got = readGauges(h.e)
	if g := got["a"]; g.parked != 0 {
		t.Fatalf("parked after release: %+v", g)
	}
	if g := got["b"]; g.implicit != 0 || g.bytes != 0 {
		t.Fatalf("tenant b after delete: %+v", g)
	}
}

// DeclaredGauges reads each declared queue's depth, bytes and drops by
// cause, and skips implicit queues however many there are.
func TestDeclaredGauges(t *testing.T) {
	h := newHarness(t, payloadOnly)
	must(t, h.e.Configure("a", "decl", OptionSet{
		Has:     HasMaxLength | HasPolicy,
		Options: Options{MaxLength: 2, Policy: PolicyDropOldest},
	}))
	if _, err := h.e.Push("a", "decl", "p", payloads("1", "22", "333")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"inbox1", "inbox2", "inbox3"} {
		if _, err := h.e.Push("a", q, "p", payloads("x")); err != nil {
			t.Fatal(err)
		}
	}
	type row struct {
		tenant, queue string
		g             QueueGauges
	}
	var got []row
	h.e.DeclaredGauges(func(tenant, queue string, g QueueGauges) {
		got = append(got, row{tenant, queue, g})
	})
	want := row{"a", "decl", QueueGauges{Depth: 2, Bytes: 5, Drops: Drops{Bounds: 1}}}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("DeclaredGauges: %+v, want [%+v]", got, want)
	}
}

// D5: a declared queue's depth gauge counts pending messages only, as the
// listing's depth does.
func TestDeclaredGaugesDepthIsPending(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{})
	h.push("q", "p", "a", "b", "c")
	h.pop(PopRequest{Queue: "q", Group: "g", Batch: 2, AutoAck: true}) // 2 reclaimable
	var depth int64 = -1
	h.e.DeclaredGauges(func(_, queue string, g QueueGauges) {
		if queue == "q" {
			depth = g.Depth
		}
	})
	if depth != 1 || h.infoOf("q").Depth != 1 {
		t.Fatalf("gauge depth %d, listing depth %d; want 1 pending", depth, h.infoOf("q").Depth)
	}
}
