// Inbox names drawn ahead (lib/cellview.js, drawAhead): a request takes a
// name drawn after the previous turn's calls were written, owned by the
// request queue's owner in the view it was drawn for, and never one drawn
// for a view that was replaced or by another mint.
import test from 'node:test'
import assert from 'node:assert/strict'
import { CellView } from '../lib/cellview.js'
import { newInbox } from '../index.js'

const transport = { memberPool: (url) => ({ url, downUntil: 0 }), callTimeout: 30000 }
const viewOf = (generation, ids) => Buffer.from(JSON.stringify({
  generation,
  tenant: '',
  members: ids.map((id, i) => ({ id, url: `http://127.0.0.1:${7100 + i}` }))
}))
const turn = () => new Promise((resolve) => setImmediate(resolve))

test('a request takes a name drawn ahead for its queue\'s owner, and the names are topped up to what the turn took', async () => {
  const cv = new CellView(transport)
  cv.apply(viewOf(1, ['a:1', 'b:1', 'c:1']))
  const owner = cv.ownerId('service')
  const first = cv.inboxFor('service', newInbox)
  assert.equal(cv.matched, true)
  assert.equal(cv.ownerId(first), owner)
  await turn()
  const i = cv.view.members.findIndex((m) => m.id === owner)
  assert.equal(cv.view.ahead[i].length, 1, 'one asked for, one drawn ahead')
  // A turn of 5 requests takes the one ready and draws 4; the refill tops
  // the names up to 5, so the next turn finds 5 ready, all owned by the
  // owner, distinct.
  const taken = []
  for (let k = 0; k < 5; k++) taken.push(cv.inboxFor('service', newInbox))
  await turn()
  const ready = [...cv.view.ahead[i]]
  assert.equal(ready.length, 5)
  for (const name of ready) {
    assert.equal(cv.ownerId(name), owner, name)
    assert.match(name, /^inbox-[0-9a-f]{32}$/)
  }
  assert.equal(new Set([...ready, ...taken, first]).size, 11, 'no name is given twice')
  const next = cv.inboxFor('service', newInbox)
  assert.equal(next, ready[ready.length - 1])
  assert.equal(cv.matched, true)
  cv.stop()
})

test('names drawn ahead for a replaced view, or by another mint, are never given', async () => {
  const cv = new CellView(transport)
  cv.apply(viewOf(1, ['a:1', 'b:1', 'c:1']))
  for (let k = 0; k < 8; k++) cv.inboxFor('service', newInbox)
  await turn()
  const old = new Set(cv.view.ahead.flat())
  assert.ok(old.size >= 8)
  // A new member set: ownership moved, the names drawn for the old one go.
  cv.apply(viewOf(2, ['d:1', 'e:1', 'f:1', 'g:1']))
  const owner = cv.ownerId('service')
  for (let k = 0; k < 8; k++) {
    const name = cv.inboxFor('service', newInbox)
    assert.ok(!old.has(name), name)
    assert.equal(cv.ownerId(name), owner, name)
  }
  await turn()
  const drawn = cv.view.ahead.flat()
  assert.equal(drawn.length, 8)
  // Another mint: what the first drew ahead is not given for it.
  let minted = 0
  const mint = () => { minted++; return 'reply-' + newInbox().slice(6) }
  const name = cv.inboxFor('service', mint)
  assert.ok(minted > 0 && !drawn.includes(name), name)
  assert.ok(name.startsWith('reply-'))
  cv.stop()
  assert.equal(cv.refill, null)
})
