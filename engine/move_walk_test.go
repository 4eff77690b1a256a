package engine

import (
	"fmt"
	"sort"
	"testing"
)

// The walks a membership change needs (D17): every queue by name, and the
// drop of every queue a predicate no longer keeps.

// EachQueueName sees every live queue of every tenant exactly once when
// nothing changes meanwhile, and stops when f says so.
func TestEachQueueNameVisitsEveryQueueOnce(t *testing.T) {
	h := newHarness(t, nil)
	var want []string
	for ti := 0; ti < 3; ti++ {
		tenant := fmt.Sprintf("t%d", ti)
		for qi := 0; qi < 40; qi++ {
			q := fmt.Sprintf("q%d", qi)
			if _, err := h.e.Push(tenant, q, "", payloads("x")); err != nil {
				t.Fatal(err)
			}
			want = append(want, tenant+"/"+q)
		}
	}
	must(t, h.e.Configure("t9", "declared-only", OptionSet{}))
	want = append(want, "t9/declared-only")
	h.e.Delete("t0", "q0") // dead queues are not seen
	want = want[1:]
	var seen []string
	h.e.EachQueueName(func(tenant, queue string) bool {
		seen = append(seen, tenant+"/"+queue)
		return true
	})
	sort.Strings(seen)
	sort.Strings(want)
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("walk saw %d names, want %d:\n%v\n%v", len(seen), len(want), seen, want)
	}
	n := 0
	h.e.EachQueueName(func(string, string) bool { n++; return n < 5 })
	if n != 5 {
		t.Fatalf("walk went on after false: %d calls", n)
	}
}

// The walk allocates nothing, whatever the number of tenants and queues
// (a membership change walks every queue the member holds).
func TestEachQueueNameIsAllocationFree(t *testing.T) {
	h := newHarness(t, nil)
	for ti := 0; ti < 20; ti++ {
		for qi := 0; qi < 50; qi++ {
			must(t, h.e.Configure(fmt.Sprintf("t%d", ti), fmt.Sprintf("q%d", qi), OptionSet{}))
		}
	}
	n := 0
	count := func(string, string) bool { n++; return true }
	if allocs := testing.AllocsPerRun(20, func() { h.e.EachQueueName(count) }); allocs != 0 {
		t.Fatalf("a walk of 1,000 queues allocates %.1f times", allocs)
	}
	// Nor does DropMoved when everything is kept, or nothing held moved
	// (declared queues this member never owned).
	keepAll := func(string, string) bool { return true }
	keepNone := func(string, string) bool { return false }
	if allocs := testing.AllocsPerRun(20, func() { h.e.DropMoved(keepAll) }); allocs != 0 {
		t.Fatalf("DropMoved keeping everything allocates %.1f times", allocs)
	}
	if allocs := testing.AllocsPerRun(20, func() { h.e.DropMoved(keepNone) }); allocs != 0 {
		t.Fatalf("DropMoved over pristine queues allocates %.1f times", allocs)
	}
}

// DropMoved drops exactly the queues keep lets go, in every tenant, and
// reports them; the kept queues' leases still ack and the dropped ones'
// ids answer stale.
func TestDropMovedDropsExactlyWhatMoved(t *testing.T) {
	h := newHarness(t, nil)
	type lease struct {
		tenant, queue string
		ms            []got
	}
	var leases []lease
	moves := func(tenant, queue string) bool { return (tenant == "a") != (queue == "q1") } // a/q0, a/q2, b/q1 move
	for _, tenant := range []string{"a", "b"} {
		must(t, h.e.Configure(tenant, "idle", OptionSet{})) // pristine: not counted
		for qi := 0; qi < 3; qi++ {
			q := fmt.Sprintf("q%d", qi)
			if _, err := h.e.Push(tenant, q, "p", payloads("1", "2")); err != nil {
				t.Fatal(err)
			}
			c := &collector{e: h.e}
			if n, _, err := h.e.Pop(&PopRequest{Tenant: tenant, Queue: q, Group: "g"}, c); n != 1 || err != nil {
				t.Fatalf("pop %s/%s: %d %v", tenant, q, n, err)
			}
			leases = append(leases, lease{tenant, q, c.msgs})
		}
	}
	queues, messages := h.e.DropMoved(func(tenant, queue string) bool { return !moves(tenant, queue) })
	if queues != 3 || messages != 6 {
		t.Fatalf("DropMoved dropped %d queues, %d messages; want 3, 6", queues, messages)
	}
	for _, l := range leases {
		want := "[acked]"
		if moves(l.tenant, l.queue) {
			want = "[stale]"
		}
		out, err := h.e.Ack(l.tenant, l.queue, "g", []AckItem{{ID: []byte(l.ms[0].ID)}}, nil)
		if err != nil || outcomes(out) != want {
			t.Fatalf("%s/%s: ack %v %v, want %s", l.tenant, l.queue, out, err, want)
		}
		if moves(l.tenant, l.queue) && h.e.lookup(l.tenant, l.queue) != nil {
			t.Fatalf("%s/%s: the implicit queue that moved is still there", l.tenant, l.queue)
		}
	}
	// A second pass finds nothing more to drop.
	if queues, messages := h.e.DropMoved(func(tenant, queue string) bool { return !moves(tenant, queue) }); queues != 0 || messages != 0 {
		t.Fatalf("second pass dropped %d, %d", queues, messages)
	}
}
