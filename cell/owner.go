package cell

import (
	"time"

	"github.com/cespare/xxhash/v2"
)

// Owner returns the index in v.Members of the owner of (tenant, queue), or
// -1 when v is nil or empty. It is rendezvous hashing (highest random
// weight): every member scores the key and the highest score owns it, so
// every member that holds the same set computes the same owner, and a
// member joining takes only the keys on which it scores highest (about
// 1/(N+1) of them), moving nothing between the others. It does not
// allocate.
func Owner(v *View, tenant, queue string) int {
	if v == nil || len(v.Members) == 0 {
		return -1
	}
	k := keyHash(tenant, queue)
	best, bestScore := 0, score(k, v.seeds[0])
	for i := 1; i < len(v.seeds); i++ {
		if s := score(k, v.seeds[i]); s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// keyHash hashes (tenant, queue): each name with xxhash, then the two
// mixed. Hashing the names apart keeps pairs that join to the same bytes
// ("ab","c" and "a","bc") apart, and is faster for short names than
// streaming both through one digest (BenchmarkKeyHash); the multiplication
// makes the mix order-sensitive, so (a, b) and (b, a) differ too.
func keyHash(tenant, queue string) uint64 {
	return score(xxhash.Sum64String(tenant), xxhash.Sum64String(queue)*0x9e3779b97f4a7c15)
}

// score is a member's weight for a key: the murmur3 64-bit finalizer of
// the key's hash mixed with the member's seed. The finalizer is a bijection
// with full avalanche, so for a uniformly hashed key the members' scores
// are independent enough that each wins an equal share (TestOwnerBalance).
func score(k, seed uint64) uint64 {
	x := k ^ seed
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// OwnerOf returns which of ids owns (tenant, queue), as every member whose
// live set is ids computes it; "" when ids is empty. It builds a view, so
// it is for tools and tests (which must predict owners from outside), not
// for the request path.
func OwnerOf(ids []string, tenant, queue string) string {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id}
	}
	v := newView(0, "", ms, true, 0, func() time.Duration { return 0 })
	i := Owner(v, tenant, queue)
	if i < 0 {
		return ""
	}
	return ids[i]
}
