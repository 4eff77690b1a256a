package libcompare

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	rendezvous "github.com/dgryski/go-rendezvous"

	"github.com/queenmq/ephemeral/cell"
)

// BenchmarkOwnerVsPeer compares cell.Owner with github.com/dgryski/go-rendezvous
// (go-redis's ring uses it; the same scheme: xxhash of the key, a mix with
// each node's hash, highest wins) on the same members and key, interleaved
// per -count round. The peer takes one key string, so a (tenant, queue)
// pair must be joined first: "peer+join" is what the server would pay,
// "peer" the lookup alone on a key joined once.
func BenchmarkOwnerVsPeer(b *testing.B) {
	tn, q := "tenant-a", "orders.eu.requests"
	for _, n := range []int{3, 50} {
		ids := addrs(n)
		ms := make([]cell.Member, n)
		for i, id := range ids {
			ms[i] = cell.Member{ID: id, Incarnation: "inc-" + id}
		}
		v := cell.StaticView(1, ids[0], ms, false)
		r := rendezvous.New(ids, xxhash.Sum64String)
		joined := tn + "\x00" + q
		b.Run(fmt.Sprintf("members=%d/ours", n), func(b *testing.B) {
			b.ReportAllocs()
			s := 0
			for b.Loop() {
				s += cell.Owner(v, tn, q)
			}
			_ = s
		})
		b.Run(fmt.Sprintf("members=%d/peer", n), func(b *testing.B) {
			b.ReportAllocs()
			s := 0
			for b.Loop() {
				s += len(r.Lookup(joined))
			}
			_ = s
		})
		b.Run(fmt.Sprintf("members=%d/peer+join", n), func(b *testing.B) {
			b.ReportAllocs()
			s := 0
			var sink string
			for b.Loop() {
				sink = tn + "\x00" + q // what a single-key API costs per call
				s += len(r.Lookup(sink))
			}
			_ = s
		})
	}
}

// addrs returns n member addresses, sorted as a view sorts its members.
func addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:6632", i+1)
	}
	slices.Sort(out)
	return out
}
