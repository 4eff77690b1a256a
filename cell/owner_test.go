package cell

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func testView(ids ...string) *View {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id, Incarnation: "inc-" + id}
	}
	return newView(1, ids[0], ms, false, 1<<62, monotonic)
}

func addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:6632", i+1)
	}
	// Members are sorted by ID in a view.
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

const keys = 100_000

func key(i int) (string, string) { return "tenant-" + strconv.Itoa(i%97), "q-" + strconv.Itoa(i) }

// Every member, holding the same set, computes the same owner: the owner
// depends only on the set, not on whose view it is.
func TestOwnerSameOnEveryMember(t *testing.T) {
	ids := addrs(5)
	var views []*View
	for _, self := range ids {
		v := testView(ids...)
		v.Self = self
		views = append(views, v)
	}
	for i := range 10_000 {
		tn, q := key(i)
		want := Owner(views[0], tn, q)
		for _, v := range views[1:] {
			if got := Owner(v, tn, q); got != want {
				t.Fatalf("(%s,%s): owner %d in one view, %d in another", tn, q, want, got)
			}
		}
	}
}

// With N members each owns about 1/N of the keys.
func TestOwnerBalance(t *testing.T) {
	for _, n := range []int{2, 3, 5, 10, 50} {
		v := testView(addrs(n)...)
		counts := make([]int, n)
		for i := range keys {
			tn, q := key(i)
			counts[Owner(v, tn, q)]++
		}
		want := float64(keys) / float64(n)
		// 5 standard deviations of a binomial share.
		tol := 5 * math.Sqrt(want*(1-1/float64(n)))
		for i, c := range counts {
			if math.Abs(float64(c)-want) > tol {
				t.Errorf("N=%d: member %d owns %d keys, want %.0f ± %.0f", n, i, c, want, tol)
			}
		}
	}
}

// The rendezvous property: with N members, adding one moves about 1/(N+1)
// of the keys, every one of them to the new member; removing it moves them
// back and nothing else.
func TestOwnerJoinMovesOnlyToNewMember(t *testing.T) {
	for _, n := range []int{1, 2, 3, 9, 49} {
		all := addrs(n + 1)
		newcomer := all[n/2] // somewhere in the middle of the sorted order
		var old []string
		for _, a := range all {
			if a != newcomer {
				old = append(old, a)
			}
		}
		before, after := testView(old...), testView(all...)
		moved := 0
		for i := range keys {
			tn, q := key(i)
			b, _ := before.Owner(tn, q)
			a, _ := after.Owner(tn, q)
			if a == b {
				continue
			}
			moved++
			if a.ID != newcomer {
				t.Fatalf("N=%d: (%s,%s) moved from %s to %s, not to the new member %s", n, tn, q, b.ID, a.ID, newcomer)
			}
		}
		want := float64(keys) / float64(n+1)
		tol := 5 * math.Sqrt(want*(1-1/float64(n+1)))
		if math.Abs(float64(moved)-want) > tol {
			t.Errorf("N=%d: a join moved %d of %d keys, want %.0f ± %.0f", n, moved, keys, want, tol)
		}
		t.Logf("N=%d -> %d: %d of %d keys moved (%.4f; 1/(N+1) = %.4f), all to the new member", n, n+1, moved, keys, float64(moved)/keys, 1/float64(n+1))
	}
}

func TestOwnerEmptyAndNil(t *testing.T) {
	if Owner(nil, "t", "q") != -1 {
		t.Fatal("nil view has an owner")
	}
	v := newView(1, "a:1", nil, false, 1<<62, monotonic)
	if Owner(v, "t", "q") != -1 {
		t.Fatal("empty view has an owner")
	}
	if _, ok := v.Owner("t", "q"); ok {
		t.Fatal("empty view has an owner")
	}
	if v.Owns("t", "q") {
		t.Fatal("empty view owns")
	}
}

// (tenant, queue) pairs that concatenate to the same bytes hash apart.
func TestKeyHashSeparatesTenantAndQueue(t *testing.T) {
	if keyHash("ab", "c") == keyHash("a", "bc") {
		t.Fatal(`("ab","c") and ("a","bc") hash the same`)
	}
	if keyHash("", "x") == keyHash("x", "") {
		t.Fatal(`("","x") and ("x","") hash the same`)
	}
	if keyHash("a", "b") == keyHash("b", "a") {
		t.Fatal(`("a","b") and ("b","a") hash the same`)
	}
	if keyHash("a", "a") == keyHash("b", "b") {
		t.Fatal(`("a","a") and ("b","b") hash the same`)
	}
}

// Owner is called per request on an event loop (P3): no allocation.
func TestOwnerAllocs(t *testing.T) {
	v := testView(addrs(3)...)
	tn, q := "tenant-a", "orders.eu"
	var sink int
	if a := testing.AllocsPerRun(1000, func() { sink += Owner(v, tn, q) }); a != 0 {
		t.Fatalf("Owner allocates %v per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		if v.Owns(tn, q) {
			sink++
		}
	}); a != 0 {
		t.Fatalf("Owns allocates %v per call", a)
	}
	_ = sink
}

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{1, 3, 10, 50} {
		v := testView(addrs(n)...)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			tn, q := "tenant-a", "orders.eu.requests"
			s := 0
			for b.Loop() {
				s += Owner(v, tn, q)
			}
			_ = s
		})
	}
}

// BenchmarkOwns is what a request pays on the loop: the owner and the
// fencing check (a monotonic clock read).
func BenchmarkOwns(b *testing.B) {
	v := testView(addrs(3)...)
	b.ReportAllocs()
	s := 0
	for b.Loop() {
		if v.Owns("tenant-a", "orders.eu.requests") {
			s++
		}
	}
	_ = s
}

// The key hash as it is against one digest streamed over both names (the
// first version), interleaved.
func BenchmarkKeyHash(b *testing.B) {
	tn, q := "tenant-a", "orders.eu.requests"
	b.Run("two-sums", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += keyHash(tn, q)
		}
		_ = s
	})
	b.Run("one-digest", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			var d xxhash.Digest
			d.ResetWithSeed(uint64(len(tn)))
			d.WriteString(tn)
			d.WriteString(q)
			s += d.Sum64()
		}
		_ = s
	})
}

// A member leaving moves exactly the keys it owned, each to one of the
// others, and nothing between the others.
func TestOwnerLeaveMovesOnlyTheLeaversKeys(t *testing.T) {
	all := addrs(5)
	leaver := all[2]
	rest := append(append([]string{}, all[:2]...), all[3:]...)
	before, after := testView(all...), testView(rest...)
	for i := range keys {
		tn, q := key(i)
		b, _ := before.Owner(tn, q)
		a, _ := after.Owner(tn, q)
		if b.ID != leaver && a != b {
			t.Fatalf("(%s,%s) moved from %s to %s though %s left", tn, q, b.ID, a.ID, leaver)
		}
	}
}
