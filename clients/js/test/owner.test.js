// The ownership function (lib/owner.js) against the answers the broker's
// own function gives for known member ids (cell/testdata/owners.json, the
// file the broker's tests read too): the SDK and the broker can never
// disagree silently about which member owns a queue.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { keyHash, ownerOf, xxh64 } from '../lib/owner.js'
import { seed32, ownerIndex32, xxh64Big, prefixState, ownerIndexSharing, ownerIndexTail } from '../lib/ownerfast.js'

const vectors = JSON.parse(readFileSync(new URL('../../../cell/testdata/owners.json', import.meta.url)))

test('xxh64 matches the reference for known inputs', () => {
  // XXH64 with seed 0, from the reference implementation's test vectors.
  assert.equal(xxh64(''), 0xef46db3751d8e999n)
  assert.equal(xxh64('a'), 0xd24ec4f1a98c6e5bn)
  assert.equal(xxh64('abc'), 0x44bc2cf5ad770999n)
  assert.equal(xxh64('Nobody inspects the spammish repetition'), 0xfbcea83c8a378bf1n)
})

test('keys and owners are the broker\'s for every vector, in any order', () => {
  assert.ok(vectors.cases.length >= 32, `${vectors.cases.length} cases`)
  for (const c of vectors.cases) {
    const name = `(${JSON.stringify(c.tenant)}, ${JSON.stringify(c.queue)}) among ${c.members.length}`
    assert.equal(keyHash(c.tenant, c.queue).toString(16).padStart(16, '0'), c.key, `${name}: key`)
    const ids = c.members.map((m) => m.id)
    assert.equal(ownerOf(ids, c.tenant, c.queue), c.owner, `${name}: owner`)
    assert.equal(ownerOf([...ids].reverse(), c.tenant, c.queue), c.owner, `${name}: owner, ids reversed`)
  }
  assert.equal(ownerOf([], 't', 'q'), undefined)
})

// lib/ownerfast.js, the per-call path of owner routing (lib/cellview.js):
// the same function on 32-bit halves.
test('the 32-bit function: the reference vectors and the broker\'s owners', () => {
  assert.equal(xxh64Big(''), 0xef46db3751d8e999n)
  assert.equal(xxh64Big('a'), 0xd24ec4f1a98c6e5bn)
  assert.equal(xxh64Big('abc'), 0x44bc2cf5ad770999n)
  assert.equal(xxh64Big('Nobody inspects the spammish repetition'), 0xfbcea83c8a378bf1n)
  for (const c of vectors.cases) {
    const ids = c.members.map((m) => m.id).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    const i = ownerIndex32(seed32(c.tenant), ids.flatMap(seed32), c.queue)
    assert.equal(ids[i], c.owner, `(${JSON.stringify(c.tenant)}, ${JSON.stringify(c.queue)}) among ${ids.length}`)
  }
})

test('the 32-bit function equals the BigInt one on random names of every length, ASCII or not', () => {
  const ids = ['10.0.0.1:7000', '10.0.0.2:7000', '10.0.0.3:7000', 'member-d', 'member-e']
  const seeds = ids.flatMap(seed32)
  for (let i = 0; i < 3000; i++) {
    let s = randomBytes(i % 130).toString(i % 2 ? 'latin1' : 'hex').slice(0, i % 130)
    if (i % 5 === 0) s = 'é' + s + '日本'
    assert.equal(xxh64Big(s), xxh64(s), JSON.stringify(s))
    const tenant = i % 3 ? 'acme' : s
    assert.equal(ids[ownerIndex32(seed32(tenant), seeds, s)], ownerOf(ids, tenant, s), JSON.stringify(s))
  }
})

test('names sharing a 32-byte prefix, hashed from byte 32 on, have the owner of the whole function', () => {
  const ids = ['10.0.0.1:7000', '10.0.0.2:7000', '10.0.0.3:7000']
  const seeds = ids.flatMap(seed32)
  const tenant = seed32('acme')
  for (let i = 0; i < 500; i++) {
    const head = randomBytes(16).toString('hex')
    prefixState(head + 'x'.repeat(i % 32))
    for (let k = 0; k < 8; k++) {
      const name = head + randomBytes(16).toString('hex').slice(0, i % 32)
      assert.equal(ownerIndexSharing(tenant, seeds, name), ownerIndex32(tenant, seeds, name), name)
      assert.equal(ids[ownerIndexSharing(tenant, seeds, name)], ownerOf(ids, 'acme', name), name)
      // The same from the bytes of its tail alone (the first 32 are not read).
      const b = Buffer.alloc(64, 0xff)
      b.write(name.slice(32), 32, 'latin1')
      assert.equal(ownerIndexTail(tenant, seeds, b, name.length), ownerIndex32(tenant, seeds, name), name)
    }
  }
})
