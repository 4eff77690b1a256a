// Random bytes for inbox names (index.js's newInbox, lib/cellview.js's
// draws), taken from one block refilled 4 KiB at a time: a randomBytes(16)
// call per request cost about a tenth of the client's CPU on the request
// path. Every byte is zeroed once taken, so names used do not linger here.

import { randomFillSync } from 'node:crypto'

const block = Buffer.alloc(4096)
let off = block.length // empty until the first take
const HEX = Buffer.from('0123456789abcdef', 'latin1')

// take returns the offset of n fresh bytes (n ≤ the block), for the caller
// to read and zero at once.
function take (n) {
  if (off + n > block.length) {
    randomFillSync(block)
    off = 0
  }
  const at = off
  off += n
  return at
}

/** n random bytes as 2n lowercase hex digits. */
export function randomHex (n) {
  const at = take(n)
  const s = block.toString('hex', at, at + n)
  block.fill(0, at, at + n)
  return s
}

/** Writes end - start random lowercase hex digits to dst[start, end). */
export function writeRandomHex (dst, start, end) {
  const at = take((end - start + 1) >> 1)
  for (let j = start, k = at; j < end; j += 2, k++) {
    const r = block[k]
    block[k] = 0
    dst[j] = HEX[r >> 4]
    if (j + 1 < end) dst[j + 1] = HEX[r & 15]
  }
}
