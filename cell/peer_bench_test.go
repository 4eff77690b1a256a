package cell

import (
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
	rendezvous "github.com/dgryski/go-rendezvous"
)

// BenchmarkOwnerVsPeer compares Owner with github.com/dgryski/go-rendezvous
// (go-redis's ring uses it; the same scheme: xxhash of the key, a mix with
// each node's hash, highest wins) on the same members and key, interleaved
// per -count round. The peer takes one key string, so a (tenant, queue)
// pair must be joined first: "peer+join" is what the server would pay,
// "peer" the lookup alone on a key joined once.
func BenchmarkOwnerVsPeer(b *testing.B) {
	tn, q := "tenant-a", "orders.eu.requests"
	for _, n := range []int{3, 50} {
		ids := addrs(n)
		v := testView(ids...)
		r := rendezvous.New(ids, xxhash.Sum64String)
		joined := tn + "\x00" + q
		b.Run(fmt.Sprintf("members=%d/ours", n), func(b *testing.B) {
			b.ReportAllocs()
			s := 0
			for b.Loop() {
				s += Owner(v, tn, q)
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
