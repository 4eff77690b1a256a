// The cell's ownership function for the dashboard (docs/cell.md,
// "Ownership"; docs/dashboard.md, "Queues"): which member of a live set
// owns a (tenant, queue), so that the queue table names each queue's
// owner and takes its row from the owner's listing. A copy of the
// JavaScript SDK's clients/js/lib/owner.js as a plain script (the page has
// no build step and no modules); it must answer exactly as the broker's
// (Go, package cell/rendezvous) does, which the browser test
// TestDashboardOwnerVectors checks in Chromium against
// cell/testdata/owners.json. Rendezvous hashing: every member scores the
// key, the highest score owns it.
//
//   key        = fmix64(xxh64(tenant) ^ xxh64(queue) * 0x9e3779b97f4a7c15)
//   seed(id)   = xxh64(id)
//   score      = fmix64(key ^ seed)
//
// xxh64 is XXH64 with seed 0 over the UTF-8 bytes of the name; fmix64 is
// MurmurHash3's 64-bit finalizer. All arithmetic is modulo 2^64 (BigInt).
'use strict';

window.queenOwner = (() => {
  const MASK = 0xffffffffffffffffn
  const P1 = 0x9e3779b185ebca87n
  const P2 = 0xc2b2ae3d27d4eb4fn
  const P3 = 0x165667b19e3779f9n
  const P4 = 0x85ebca77c2b2ae63n
  const P5 = 0x27d4eb2f165667c5n
  const PHI = 0x9e3779b97f4a7c15n

  const encoder = new TextEncoder()

  function rotl (x, r) {
    return ((x << BigInt(r)) | (x >> BigInt(64 - r))) & MASK
  }

  function round (acc, lane) {
    acc = (acc + lane * P2) & MASK
    return (rotl(acc, 31) * P1) & MASK
  }

  function mergeRound (acc, v) {
    acc ^= round(0n, v)
    return (acc * P1 + P4) & MASK
  }

  /** XXH64 of s's UTF-8 bytes, seed 0, as a BigInt. */
  function xxh64 (s) {
    const b = encoder.encode(s)
    const view = new DataView(b.buffer, b.byteOffset, b.byteLength)
    const n = b.length
    let i = 0
    let h
    if (n >= 32) {
      let v1 = (P1 + P2) & MASK
      let v2 = P2
      let v3 = 0n
      let v4 = (MASK + 1n - P1) & MASK
      for (; i + 32 <= n; i += 32) {
        v1 = round(v1, view.getBigUint64(i, true))
        v2 = round(v2, view.getBigUint64(i + 8, true))
        v3 = round(v3, view.getBigUint64(i + 16, true))
        v4 = round(v4, view.getBigUint64(i + 24, true))
      }
      h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) & MASK
      h = mergeRound(h, v1)
      h = mergeRound(h, v2)
      h = mergeRound(h, v3)
      h = mergeRound(h, v4)
    } else {
      h = P5
    }
    h = (h + BigInt(n)) & MASK
    for (; i + 8 <= n; i += 8) {
      h ^= round(0n, view.getBigUint64(i, true))
      h = (rotl(h, 27) * P1 + P4) & MASK
    }
    if (i + 4 <= n) {
      h ^= (BigInt(view.getUint32(i, true)) * P1) & MASK
      h = (rotl(h, 23) * P2 + P3) & MASK
      i += 4
    }
    for (; i < n; i++) {
      h ^= (BigInt(b[i]) * P5) & MASK
      h = (rotl(h, 11) * P1) & MASK
    }
    h ^= h >> 33n
    h = (h * P2) & MASK
    h ^= h >> 29n
    h = (h * P3) & MASK
    h ^= h >> 32n
    return h
  }

  /** MurmurHash3's 64-bit finalizer of a ^ b: a member's score for a key. */
  function score (key, seed) {
    let x = key ^ seed
    x ^= x >> 33n
    x = (x * 0xff51afd7ed558ccdn) & MASK
    x ^= x >> 33n
    x = (x * 0xc4ceb9fe1a85ec53n) & MASK
    x ^= x >> 33n
    return x
  }

  /** The key of (tenant, queue). */
  function keyHash (tenant, queue) {
    return score(xxh64(tenant), (xxh64(queue) * PHI) & MASK)
  }

  /**
   * Which of ids owns (tenant, queue); undefined when ids is empty. The ids
   * are taken in sorted order, so a tie (a 64-bit collision) goes to the
   * lower id whatever order they are listed in, as the broker decides.
   */
  function ownerOf (ids, tenant, queue) {
    if (ids.length === 0) return undefined
    const sorted = [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    const key = keyHash(tenant, queue)
    let best = 0
    let bestScore = score(key, xxh64(sorted[0]))
    for (let i = 1; i < sorted.length; i++) {
      const s = score(key, xxh64(sorted[i]))
      if (s > bestScore) {
        best = i
        bestScore = s
      }
    }
    return sorted[best]
  }

  return { xxh64, keyHash, ownerOf };
})();
