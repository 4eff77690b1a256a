// Owner routing (lib/cellview.js, docs/sdk-transport-js.md "Owner routing"):
// a client given one member's URL learns the cell's view and sends each
// queue's push, pop, ack and depth read to the member that owns it. Three
// scripted members on real TCP listeners (test/scripted.js) answer the view
// read and count every request they are sent; each test runs over links
// and over HTTP/1.1. A real single broker checks that nothing changes there
// but one view read. A real cell of three: conformance.TestCellJSSDKOwnerRouting.

import { test as nodeTest } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { Queen, newInbox } from '../index.js'
import { ownerOf } from '../lib/owner.js'
import { scripted, answer } from './scripted.js'
import { startBroker, freePort } from './broker.js'

const API = '/api/v1/ephemeral'
const TENANT = 'acme'

function client (t, url, options) {
  const q = new Queen(url, options)
  t.after(() => q.close().catch(() => {}))
  return q
}

// Waits for cond() with a generous bound.
async function until (what, cond, ms = 10000) {
  const deadline = Date.now() + ms
  for (;;) {
    if (cond()) return
    assert.ok(Date.now() < deadline, `waited ${ms} ms for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

// A queue whose owner among ids is want.
function queueOwnedBy (prefix, want, ids) {
  for (let i = 0; ; i++) {
    const q = `${prefix}-${i}`
    if (ownerOf(ids, TENANT, q) === want) return q
  }
}

const popOne = (q) => JSON.stringify({ queue: q, messages: [{ id: 'e:1:Default:1', partition: 'Default', attempts: 0, payload: 1 }] })

// The answer of a member to a call of the family: every request recorded
// as { route, queue } in srv.seen.
function serve (srv, req, handle) {
  const u = new URL(req.path, 'http://x')
  const route = u.pathname.slice(API.length)
  let queue = u.searchParams.get('queue')
  if (req.body) queue = JSON.parse(req.body).queue
  if (route.startsWith('/queues/')) queue = decodeURIComponent(route.split('/')[2])
  const r = { route, queue }
  srv.seen.push(r)
  const custom = handle?.(r)
  if (custom !== undefined) return custom
  if (route === '/push') {
    const b = JSON.parse(req.body)
    if (b.messages[0].payload?.replyTo) srv.requests.push(b.messages[0].payload.replyTo)
    return answer(201, JSON.stringify({ pushed: b.messages.length }))
  }
  if (route === '/pop' && queue.startsWith('inbox-')) {
    // Nobody replies: the wait ends empty, as the broker's does.
    const ms = +u.searchParams.get('timeout')
    return new Promise((resolve) => setTimeout(() => resolve(answer(200, JSON.stringify({ queue, messages: [] }))), ms))
  }
  if (route === '/pop') return answer(200, popOne(queue))
  if (route === '/ack') return answer(200, '{"results":[{"id":"e:1:Default:1","outcome":"acked"}]}')
  if (route.startsWith('/queues/')) return answer(200, JSON.stringify({ queue, pending: 0 }))
  return answer(200, '{"queues":[],"count":0,"cellBytes":0}')
}

// Three scripted members a, b, c. view(srv, req) answers each member's view
// read (default: the three, with their URLs); handle(srv, r) may answer a
// call itself.
async function cell (t, link, { view, handle, urls } = {}) {
  const members = []
  for (const name of ['a', 'b', 'c']) {
    const m = { name, seen: [], requests: [], viewReads: [] }
    const srv = await scripted(t, async (req, sock) => {
      const a = await serve(m, req, handle && ((r) => handle(m, r)))
      if (!sock.destroyed) sock.write(a)
    }, {
      link,
      view: (req) => {
        m.viewReads.push(req.path)
        if (view) return view(m, req)
        return /after=/.test(req.path) ? new Promise(() => {}) : members.answer()
      }
    })
    m.srv = srv
    m.url = srv.url
    m.id = `10.0.0.${members.length + 1}:7000`
    members.push(m)
  }
  members.ids = members.map((m) => m.id)
  members.generation = 1
  members.answer = (list = members, gen = members.generation) => answer(200, JSON.stringify({
    generation: gen,
    tenant: TENANT,
    self: members[0].id,
    members: list.map((m) => ({ id: m.id, url: urls?.[m.name] ?? m.url }))
  }))
  return members
}

function test (name, fn) {
  nodeTest(`${name} [link]`, (t) => fn(t, true))
  nodeTest(`${name} [http]`, (t) => fn(t, false))
}

const calls = (m) => m.seen.map((r) => `${r.route.startsWith('/queues/') ? '/depth' : r.route} ${r.queue}`)

test('given one member\'s URL, each queue\'s push, pop, ack and depth go to its owner', async (t, link) => {
  const ms = await cell(t, link)
  const [a, b, c] = ms
  const q = client(t, a.url, { forceHTTP: !link })
  const e = q.ephemeral
  await e.queues() // the first answered call starts the watch
  await until('the view', () => q.transport.cell.view !== null)
  for (const m of ms) m.seen.length = 0
  const owned = ms.map((m) => queueOwnedBy('jsroute', m.id, ms.ids))
  for (const queue of owned) {
    assert.deepEqual(await e.push(queue, [1]), { pushed: 1 })
    const got = await e.pop(queue, { group: 'g' })
    assert.equal(got.messages.length, 1)
    const w = await e.pop(queue, { wait: true, timeout: 1000 })
    assert.equal(w.messages.length, 1)
    assert.equal((await e.ack(queue, got.messages, { group: 'g' })).results[0].outcome, 'acked')
    assert.deepEqual(await e.depth(queue), { queue, pending: 0 })
  }
  for (let i = 0; i < 3; i++) {
    const queue = owned[i]
    assert.deepEqual(calls(ms[i]), [`/push ${queue}`, `/pop ${queue}`, `/pop ${queue}`, `/ack ${queue}`, `/depth ${queue}`], `member ${ms[i].name}`)
  }
  // Not per queue: the configured URL.
  await e.queues()
  assert.deepEqual(calls(a).slice(-1), ['/queues null'])
  assert.equal(b.seen.length + c.seen.length, 10)
  // One view read on the configured member then one waiting (after=1);
  // none sent to the others.
  await until('the waiting view read', () => a.viewReads.length === 2)
  assert.match(a.viewReads[1], /\?after=1&timeout=60000$/)
  assert.equal(b.viewReads.length + c.viewReads.length, 0)
  if (link) assert.deepEqual(ms.map((m) => m.srv.links), [1, 1, 1], 'one link per member')
  else assert.deepEqual(ms.map((m) => m.srv.upgrades), [0, 0, 0])
})

test('request(): the push to the service queue\'s owner, the inbox pop to the inbox\'s owner; the reply to the inbox\'s owner', async (t, link) => {
  let pending = null
  const ms = await cell(t, link, {
    handle: (m, r) => {
      if (r.route === '/pop' && r.queue.startsWith('inbox-')) {
        return new Promise((resolve) => { pending = () => resolve(answer(200, JSON.stringify({ queue: r.queue, messages: [{ id: 'e:1:Default:9', partition: 'Default', attempts: 0, payload: 'pong' }] }))) })
      }
    }
  })
  const [a, b] = ms
  const q = client(t, a.url, { forceHTTP: !link })
  await q.ephemeral.queues()
  await until('the view', () => q.transport.cell.view !== null)
  const svc = queueOwnedBy('svc', b.id, ms.ids)
  const got = q.ephemeral.request(svc, 'ping', { timeout: 5000 })
  await until('the request pushed', () => b.requests.length === 1)
  const inbox = b.requests[0]
  const inboxOwner = ms.find((m) => m.id === ownerOf(ms.ids, TENANT, inbox))
  await until('the inbox pop parked', () => pending !== null)
  assert.deepEqual(calls(inboxOwner).filter((s) => s.startsWith('/pop')), [`/pop ${inbox}`])
  pending()
  assert.equal((await got).payload, 'pong')
  // Inboxes are drawn owned by the service queue's owner (32 draws, as
  // the Go SDK: a miss is (2/3)^32, under 1 in 400,000): the push and the
  // inbox pop go to one member.
  const drawn = Array.from({ length: 30 }, () => q.transport.inbox(svc, newInbox))
  const onB = drawn.filter((n) => ownerOf(ms.ids, TENANT, n) === b.id).length
  assert.equal(onB, 30, `${onB} of 30 inboxes owned by the service queue's owner`)
  assert.ok(drawn.every((n) => /^inbox-[0-9a-f]{32}$/.test(n)))
  for (const m of ms) m.seen.length = 0
  // A responder's reply goes to the inbox's owner.
  await q.ephemeral.reply({ payload: { replyTo: inbox, payload: 1 } }, 'pong')
  assert.deepEqual(calls(inboxOwner), [`/push ${inbox}`])
})

test('a stale view: the old owner refuses owner_moved, the client reads the view afresh and the call goes to the new owner, no call failing', async (t, link) => {
  // The view read waiting (after=G) is never answered: the client's view
  // stays the old one until it reads the view afresh. Member c joined
  // behind its back and owns the queue now; b, the old owner, refuses.
  const ms = await cell(t, link, {
    view: (m, req) => {
      if (/after=/.test(req.path)) return new Promise(() => {})
      return m.viewReads.length === 1 ? ms.answer(ms.slice(0, 2), 1) : ms.answer(ms, 2)
    },
    handle: (m, r) => {
      if (m.name === 'b' && r.queue === moved) return answer(503, '{"error":"ownership moved while the request was in flight","code":"owner_moved"}')
    }
  })
  const [a, b, c] = ms
  const ab = ms.ids.slice(0, 2)
  let moved
  for (let i = 0; ; i++) {
    moved = `moved-${i}`
    if (ownerOf(ab, TENANT, moved) === b.id && ownerOf(ms.ids, TENANT, moved) === c.id) break
  }
  const q = client(t, a.url, { forceHTTP: !link })
  await q.ephemeral.queues()
  await until('the first view', () => q.transport.cell.view !== null)
  assert.equal(q.transport.cell.view.members.length, 2)
  for (const m of ms) m.seen.length = 0
  assert.deepEqual(await q.ephemeral.push(moved, [1]), { pushed: 1 })
  assert.equal((await q.ephemeral.pop(moved, { wait: true, timeout: 1000 })).messages.length, 1)
  assert.equal((await q.ephemeral.ack(moved, ['e:1:Default:1'])).results[0].outcome, 'acked')
  assert.deepEqual(calls(b), [`/push ${moved}`], 'the old owner was sent the push once')
  assert.deepEqual(calls(c), [`/push ${moved}`, `/pop ${moved}`, `/ack ${moved}`], 'then everything went to the new owner')
  assert.deepEqual(calls(a), [], 'nothing relayed through the configured member')
  assert.equal(a.viewReads.filter((p) => !/after=/.test(p)).length, 2, 'one read afresh after the refusal')
})

test('a member whose URL cannot be dialled: its queues go through the configured URL (which relays), calls succeed', async (t, link) => {
  const closed = `http://127.0.0.1:${await freePort()}`
  const ms = await cell(t, link, { urls: { c: closed } })
  const [a, b, c] = ms
  const q = client(t, a.url, { forceHTTP: !link })
  await q.ephemeral.queues()
  await until('the view', () => q.transport.cell.view !== null)
  for (const m of ms) m.seen.length = 0
  const cq = queueOwnedBy('unreachable', c.id, ms.ids)
  const bq = queueOwnedBy('reachable', b.id, ms.ids)
  assert.deepEqual(await q.ephemeral.push(cq, [1]), { pushed: 1 })
  assert.equal((await q.ephemeral.pop(cq, { wait: true, timeout: 1000 })).messages.length, 1)
  const r = await q.ephemeral.request(cq, 'x', { timeout: 200 }).catch((err) => err)
  assert.equal(r.name, 'RequestTimeoutError', 'request() sent, nobody replying')
  assert.deepEqual(await q.ephemeral.push(bq, [1]), { pushed: 1 })
  assert.deepEqual(calls(a).filter((s) => !s.includes('inbox-')), [`/push ${cq}`, `/pop ${cq}`, `/push ${cq}`])
  assert.deepEqual(calls(b).filter((s) => !s.includes('inbox-')), [`/push ${bq}`])
  assert.equal(c.seen.length, 0)
})

test('a member with no URL, or plain HTTP when the configured URL is https: routed through the configured URL', async (t) => {
  const ms = await cell(t, true, { urls: { b: '' } })
  const q = client(t, ms[0].url)
  await q.ephemeral.queues()
  await until('the view', () => q.transport.cell.view !== null)
  const bq = queueOwnedBy('nourl', ms[1].id, ms.ids)
  assert.equal(q.transport.route(bq), null)
  const cq = queueOwnedBy('url', ms[2].id, ms.ids)
  assert.equal(q.transport.route(cq).origin, ms[2].url)
  // An https client never sends its token to a plain http member.
  const s = new Queen('https://127.0.0.1:1')
  t.after(() => s.close())
  assert.equal(s.transport.memberPool('http://10.0.0.9:6632'), null)
  assert.equal(s.transport.memberPool('https://10.0.0.9:6632').origin, 'https://10.0.0.9:6632')
  assert.equal(s.transport.memberPool('https://10.0.0.9:6632/path'), null)
  assert.equal(s.transport.memberPool('ftp://10.0.0.9'), null)
})

test('a new view re-routes: the waiting view read answered with another member set moves the next calls', async (t, link) => {
  let release = null
  const ms = await cell(t, link, {
    view: (m, req) => {
      if (!/after=/.test(req.path)) return ms.answer(ms.slice(0, 2), 1)
      if (/after=1&/.test(req.path)) return new Promise((resolve) => { release = () => resolve(ms.answer(ms, 2)) })
      return new Promise(() => {})
    }
  })
  const [a, b, c] = ms
  let moved
  for (let i = 0; ; i++) {
    moved = `rerouted-${i}`
    if (ownerOf(ms.ids.slice(0, 2), TENANT, moved) === b.id && ownerOf(ms.ids, TENANT, moved) === c.id) break
  }
  const q = client(t, a.url, { forceHTTP: !link })
  await q.ephemeral.queues()
  await until('the waiting view read', () => release !== null)
  await q.ephemeral.push(moved, [1])
  assert.deepEqual(calls(b), [`/push ${moved}`])
  release()
  await until('the new view', () => q.transport.cell.view?.members.length === 3)
  await q.ephemeral.push(moved, [2])
  assert.deepEqual(calls(c), [`/push ${moved}`])
  assert.equal(calls(b).length, 1)
})

test('the member the client was given dies: its calls and the view read go to another member of the view', async (t, link) => {
  const ms = await cell(t, link)
  const [a, b, c] = ms
  const q = client(t, a.url, { forceHTTP: !link })
  await q.ephemeral.queues()
  await until('the view', () => q.transport.cell.view !== null)
  const aq = queueOwnedBy('given', a.id, ms.ids)
  a.srv.stop()
  // The client sees A's connections close (a call written before that is a
  // lost answer, "may have been applied", as with any broker killed).
  const home = q.transport.pools[0]
  await until('A\'s connections closed', () => home.links.length === 0 && home.shared.length === 0)
  for (const m of ms) m.seen.length = 0
  // A's queue (a push, a waiting pop, an ack, a request) through the first
  // other member of the view, which relays; nothing fails.
  assert.deepEqual(await q.ephemeral.push(aq, [1]), { pushed: 1 })
  assert.equal((await q.ephemeral.pop(aq, { wait: true, timeout: 1000 })).messages.length, 1)
  assert.equal((await q.ephemeral.ack(aq, ['e:1:Default:1'])).results[0].outcome, 'acked')
  const r = await q.ephemeral.request(aq, 'x', { timeout: 300 }).catch((err) => err)
  assert.equal(r.name, 'RequestTimeoutError', 'request() sent, nobody replying')
  assert.deepEqual(calls(b).filter((s) => !s.includes('inbox-')), [`/push ${aq}`, `/pop ${aq}`, `/ack ${aq}`, `/push ${aq}`])
  assert.equal(c.seen.filter((r) => r.queue === aq).length, 0)
  // The view read goes on with B.
  await until('a view read on B', () => b.viewReads.length > 0)
})

nodeTest('a single broker: one view read (the broker\'s /metrics route="cell"), then nothing; ownerRouting: false sends none', async (t) => {
  const b = await startBroker(t)
  const count = async () => {
    const text = await get(b.url, '/metrics')
    const m = /^queen_ephemeral_request_duration_seconds_count\{route="cell"\} (\d+)$/m.exec(text)
    return m ? +m[1] : 0
  }
  const q = client(t, b.url)
  for (let i = 0; i < 20; i++) await q.ephemeral.push('single', [i])
  await until('the view read answered', () => q.transport.cell.state === 2)
  for (let i = 0; i < 20; i++) await q.ephemeral.pop('single', { batch: 1 })
  assert.equal(q.transport.cell.reads, 1)
  assert.equal(q.transport.cell.view, null)
  assert.equal(await count(), 1)
  const off = client(t, b.url, { ownerRouting: false })
  await off.ephemeral.push('single', [1])
  assert.equal(off.transport.cell, null)
  assert.equal(await count(), 1)
})

nodeTest('a waiting view read keeps no process alive', async (t) => {
  const ms = await cell(t, true, { view: (m, req) => /after=/.test(req.path) ? new Promise(() => {}) : ms.answer() })
  const script = `
    import { Queen } from ${JSON.stringify(fileURLToPath(new URL('../index.js', import.meta.url)))}
    const q = new Queen(${JSON.stringify(ms[0].url)})
    await q.ephemeral.push('x', [1])
    const t0 = Date.now()
    while (q.transport.cell.view === null && Date.now() - t0 < 10000) await new Promise((resolve) => setTimeout(resolve, 5))
    process.stdout.write(q.transport.cell.view === null ? 'no view' : 'view')
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  const code = await new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 15000)
    child.on('exit', (c, sig) => { clearTimeout(timer); resolve(sig ?? c) })
  })
  assert.equal(out, 'view')
  assert.equal(code, 0, 'the process ended by itself with the view read waiting')
  await until('the waiting view read', () => ms[0].viewReads.length === 2)
})

// A GET on a connection of its own; resolves with the body.
function get (url, path) {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: u.hostname, port: +u.port })
    let out = ''
    s.on('data', (d) => { out += d })
    s.on('end', () => resolve(out))
    s.on('error', reject)
    s.write(`GET ${path} HTTP/1.1\r\nhost: ${u.host}\r\nconnection: close\r\n\r\n`)
  })
}
