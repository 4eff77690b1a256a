// Package rendezvous is the cell's ownership function (D17; docs/cell.md,
// "Ownership"): which member of a live set owns a (tenant, queue). The
// members, and the SDKs that send each queue's calls to its owner, compute
// it with this code; cell/testdata/owners.json holds its answers for known
// member ids, which every implementation (this one, and the JavaScript
// SDK's) is tested against, so that no two builds disagree silently during
// a rolling upgrade. It depends on nothing of the cell, so that the Go SDK
// imports it without the cell's PostgreSQL.
//
// It is rendezvous hashing (highest random weight): every member scores
// the key and the highest score owns it. A member joining takes only the
// keys on which it scores highest (about 1/(N+1) of them), moving nothing
// between the others.
package rendezvous

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Key hashes (tenant, queue): fmix64(xxh64(tenant) ^ xxh64(queue)·φ). The
// names are hashed apart, so pairs that join to the same bytes ("ab","c"
// and "a","bc") differ; the multiplication by φ (0x9e3779b97f4a7c15) makes
// it order-sensitive, so (a, b) and (b, a) differ too.
func Key(tenant, queue string) uint64 {
	return Score(xxhash.Sum64String(tenant), xxhash.Sum64String(queue)*0x9e3779b97f4a7c15)
}

// Seed is a member's seed: xxh64 of its id.
func Seed(memberID string) uint64 { return xxhash.Sum64String(memberID) }

// Score is a member's weight for a key: MurmurHash3's 64-bit finalizer
// (fmix64) of key ^ seed, a bijection with full avalanche, so that for a
// uniformly hashed key the members' scores are independent enough for
// each to win an equal share.
func Score(key, seed uint64) uint64 {
	x := key ^ seed
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Owner returns the index in seeds of the member with the highest score
// for key, the first of them on a tie (which needs a 64-bit collision);
// -1 when seeds is empty. It does not allocate.
func Owner(key uint64, seeds []uint64) int {
	if len(seeds) == 0 {
		return -1
	}
	best, bestScore := 0, Score(key, seeds[0])
	for i := 1; i < len(seeds); i++ {
		if s := Score(key, seeds[i]); s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// OwnerOf returns which of ids owns (tenant, queue), "" when ids is empty.
// The ids are taken in sorted order, so a tie goes to the lower id and the
// answer does not depend on how the caller listed them. It allocates: it
// is for callers that hold ids, not seeds (a client's view of the cell).
func OwnerOf(ids []string, tenant, queue string) string {
	if len(ids) == 0 {
		return ""
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	seeds := make([]uint64, len(sorted))
	for i, id := range sorted {
		seeds[i] = Seed(id)
	}
	return sorted[Owner(Key(tenant, queue), seeds)]
}
