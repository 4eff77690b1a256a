// The ownership function (lib/owner.js) against the answers the broker's
// own function gives for known member ids (cell/testdata/owners.json, the
// file the broker's tests read too): the SDK and the broker can never
// disagree silently about which member owns a queue.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { keyHash, ownerOf, xxh64 } from '../lib/owner.js'

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
