// The ownership function of lib/owner.js (docs/cell.md, "Ownership") on
// 64-bit values held as two 32-bit halves, for the per-call path of owner
// routing (lib/cellview.js). lib/owner.js computes over BigInt, which costs
// about 5 µs for an inbox name of 38 bytes and allocates on every
// operation; this computes the same numbers with Math.imul and 16-bit
// partial products, no allocation for ASCII names, at a fraction of that
// (test/owner.test.js checks both against cell/testdata/owners.json and
// against each other on random names). Results are returned in the module's
// registers R[0] and R[1] (hi and lo halves), read at once by the caller.

// The registers: a typed array, so that the halves (uint32, often above
// the small-integer range) are stored unboxed, not allocated per store.
const R = new Uint32Array(2)

const encoder = new TextEncoder()
const ascii = new Uint8Array(256)

// a × b mod 2^64 into H, L.
function mul (ah, al, bh, bl) {
  const a0 = al & 0xffff
  const a1 = al >>> 16
  const b0 = bl & 0xffff
  const b1 = bl >>> 16
  const p00 = a0 * b0
  const p01 = a0 * b1
  const p10 = a1 * b0
  const mid = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff)
  R[1] = (((mid & 0xffff) << 16) | (p00 & 0xffff)) >>> 0
  const hi = a1 * b1 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16) // al × bl's high half
  R[0] = (hi + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0
}

// a + b mod 2^64 into H, L.
function add (ah, al, bh, bl) {
  const lo = al + bl
  R[1] = lo >>> 0
  R[0] = (ah + bh + (lo > 0xffffffff ? 1 : 0)) >>> 0
}

// rotl(a, r) for 0 < r < 32 into H, L.
function rotl (ah, al, r) {
  R[0] = ((ah << r) | (al >>> (32 - r))) >>> 0
  R[1] = ((al << r) | (ah >>> (32 - r))) >>> 0
}

// XXH64's round: rotl(acc + lane × P2, 31) × P1.
function round (ah, al, lh, ll) {
  mul(lh, ll, 0xc2b2ae3d, 0x27d4eb4f)
  add(ah, al, R[0], R[1])
  rotl(R[0], R[1], 31)
  mul(R[0], R[1], 0x9e3779b1, 0x85ebca87)
}

// (acc ^ round(0, v)) × P1 + P4.
function mergeRound (ah, al, vh, vl) {
  round(0, 0, vh, vl)
  mul((ah ^ R[0]) >>> 0, (al ^ R[1]) >>> 0, 0x9e3779b1, 0x85ebca87)
  add(R[0], R[1], 0x85ebca77, 0xc2b2ae63)
}

let loaded = 0 // the byte length of the name load() read

// The UTF-8 bytes of s: the ascii scratch for an ASCII name (no
// allocation), else an encoded copy; their length in loaded.
function load (s) {
  const n = s.length
  if (n <= ascii.length) {
    let i = 0
    for (; i < n; i++) {
      const c = s.charCodeAt(i)
      if (c >= 0x80) break
      ascii[i] = c
    }
    if (i === n) {
      loaded = n
      return ascii
    }
  }
  const b = encoder.encode(s)
  loaded = b.length
  return b
}

/** XXH64 (seed 0) of s's UTF-8 bytes into R. */
function xxh64 (s) {
  const b = load(s)
  const n = loaded
  if (n < 32) {
    finish(b, 0, n, 0x27d4eb2f, 0x165667c5) // P5
    return
  }
  stripes(b, n)
  finish(b, n & ~31, n, R[0], R[1])
}

// XXH64's stripes of 32 bytes over b[0, n), n ≥ 32, merged: h into R.
function stripes (b, n) {
  add(0x9e3779b1, 0x85ebca87, 0xc2b2ae3d, 0x27d4eb4f)
  let v1h = R[0]; let v1l = R[1]
  let v2h = 0xc2b2ae3d; let v2l = 0x27d4eb4f
  let v3h = 0; let v3l = 0
  let v4h = 0x61c8864e; let v4l = 0x7a143579 // -P1 mod 2^64
  for (let i = 0; i + 32 <= n; i += 32) {
    round(v1h, v1l, lane(b, i + 4), lane(b, i)); v1h = R[0]; v1l = R[1]
    round(v2h, v2l, lane(b, i + 12), lane(b, i + 8)); v2h = R[0]; v2l = R[1]
    round(v3h, v3l, lane(b, i + 20), lane(b, i + 16)); v3h = R[0]; v3l = R[1]
    round(v4h, v4l, lane(b, i + 28), lane(b, i + 24)); v4h = R[0]; v4l = R[1]
  }
  rotl(v1h, v1l, 1); let hh = R[0]; let hl = R[1]
  rotl(v2h, v2l, 7); add(hh, hl, R[0], R[1]); hh = R[0]; hl = R[1]
  rotl(v3h, v3l, 12); add(hh, hl, R[0], R[1]); hh = R[0]; hl = R[1]
  rotl(v4h, v4l, 18); add(hh, hl, R[0], R[1])
  mergeRound(R[0], R[1], v1h, v1l)
  mergeRound(R[0], R[1], v2h, v2l)
  mergeRound(R[0], R[1], v3h, v3l)
  mergeRound(R[0], R[1], v4h, v4l)
}

// XXH64 from h (hh:hl, after the stripes) over b[i, n) and the length n,
// avalanched, into R.
function finish (b, i, n, hh, hl) {
  add(hh, hl, 0, n); hh = R[0]; hl = R[1]
  for (; i + 8 <= n; i += 8) {
    round(0, 0, lane(b, i + 4), lane(b, i))
    rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 27)
    mul(R[0], R[1], 0x9e3779b1, 0x85ebca87)
    add(R[0], R[1], 0x85ebca77, 0xc2b2ae63); hh = R[0]; hl = R[1]
  }
  if (i + 4 <= n) {
    mul(0, lane(b, i), 0x9e3779b1, 0x85ebca87)
    rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 23)
    mul(R[0], R[1], 0xc2b2ae3d, 0x27d4eb4f)
    add(R[0], R[1], 0x165667b1, 0x9e3779f9); hh = R[0]; hl = R[1]
    i += 4
  }
  for (; i < n; i++) {
    mul(0, b[i], 0x27d4eb2f, 0x165667c5)
    rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 11)
    mul(R[0], R[1], 0x9e3779b1, 0x85ebca87); hh = R[0]; hl = R[1]
  }
  // avalanche: h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32
  hl = (hl ^ (hh >>> 1)) >>> 0
  mul(hh, hl, 0xc2b2ae3d, 0x27d4eb4f); hh = R[0]; hl = R[1]
  hl = (hl ^ ((hl >>> 29) | (hh << 3))) >>> 0
  hh = (hh ^ (hh >>> 29)) >>> 0
  mul(hh, hl, 0x165667b1, 0x9e3779f9); hh = R[0]; hl = R[1]
  R[1] = (hl ^ hh) >>> 0
  R[0] = hh
}

// The little-endian 32-bit word of b at i.
function lane (b, i) {
  return (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0
}

// fmix64(ah:al ^ bh:bl) into H, L.
function score (ah, al, bh, bl) {
  let h = (ah ^ bh) >>> 0
  let l = (al ^ bl) >>> 0
  l = (l ^ (h >>> 1)) >>> 0
  mul(h, l, 0xff51afd7, 0xed558ccd); h = R[0]; l = R[1]
  l = (l ^ (h >>> 1)) >>> 0
  mul(h, l, 0xc4ceb9fe, 0x1a85ec53); h = R[0]; l = R[1]
  R[1] = (l ^ (h >>> 1)) >>> 0
  R[0] = h
}

/**
 * A member's seed as [hi, lo]: XXH64 of its id. Computed once per view.
 */
export function seed32 (id) {
  xxh64(id)
  return [R[0], R[1]]
}

/**
 * The index in seeds (hi, lo pairs flattened: [h0, l0, h1, l1, ...]) of
 * the owner of (tenant, queue), given tenant = the tenant's [hi, lo] XXH64:
 * the highest score, ties to the lower index (members sorted by id).
 */
export function ownerIndex32 (tenant, seeds, queue) {
  xxh64(queue)
  return pick(tenant, seeds)
}

// The stripe state of a prefix (prefixState): h after its one stripe.
const P = new Uint32Array(2)

/**
 * Remembers XXH64's state after the first 32 bytes of s (ASCII, 32 ≤
 * length < 64), for ownerIndexSharing: names of that length that share
 * those bytes are then hashed from byte 32 on (a request's inbox drawn
 * until its owner is the request queue's: lib/cellview.js).
 */
export function prefixState (s) {
  stripes(load(s), 32)
  P[0] = R[0]
  P[1] = R[1]
}

/** ownerIndex32 of s, ASCII, as long as the name given to prefixState (under 64) and sharing its first 32 bytes. */
export function ownerIndexSharing (tenant, seeds, s) {
  const b = load(s)
  finish(b, 32, loaded, P[0], P[1])
  return pick(tenant, seeds)
}

/**
 * ownerIndexSharing of the name whose bytes from 32 to n are b[32, n) (b's
 * first 32 bytes are not read): a draw tested before any string is made of
 * it (lib/cellview.js).
 */
export function ownerIndexTail (tenant, seeds, b, n) {
  finish(b, 32, n, P[0], P[1])
  return pick(tenant, seeds)
}

// The owner's index for the queue whose XXH64 is in R (see ownerIndex32).
function pick (tenant, seeds) {
  mul(R[0], R[1], 0x9e3779b9, 0x7f4a7c15) // × φ
  score(tenant[0], tenant[1], R[0], R[1])
  const kh = R[0]
  const kl = R[1]
  let best = 0
  score(kh, kl, seeds[0], seeds[1])
  let bh = R[0]
  let bl = R[1]
  for (let k = 2; k < seeds.length; k += 2) {
    score(kh, kl, seeds[k], seeds[k + 1])
    if (R[0] > bh || (R[0] === bh && R[1] > bl)) {
      bh = R[0]
      bl = R[1]
      best = k >> 1
    }
  }
  return best
}

/** XXH64 of s as a BigInt (tests: the same as lib/owner.js's). */
export function xxh64Big (s) {
  xxh64(s)
  return (BigInt(R[0]) << 32n) | BigInt(R[1])
}
