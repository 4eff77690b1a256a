// The link (lib/link.js, lib/frames.js, docs/link.md): every call on one
// upgraded connection against a real broker, counted from the broker's
// /metrics; the fallback to HTTP/1.1 through a proxy that drops the
// upgrade and from an older broker; forceHTTP; the identity's refusal of
// the upgrade; a broker killed with calls in flight; cancelling a parked
// pop; pings; the refusals a real broker produces only under load (busy,
// lost), from a scripted link.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import tls from 'node:tls'
import { readFileSync } from 'node:fs'
import { spawn } from 'node:child_process'
import { createHmac } from 'node:crypto'
import { Queen, QueenError, ConnectionError, RequestTimeoutError, Codes, parseRequest } from '../index.js'
import { FrameReader, encodeRequest, parseAnswer, refusalServed } from '../lib/frames.js'
import { startBroker } from './broker.js'
import { scripted, answer } from './scripted.js'

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function client (t, url, options) {
  const q = new Queen(url, options)
  t.after(() => q.close().catch(() => {}))
  return q
}

// The broker's gauges, read on a connection of their own (closed after):
// queen_ephemeral_connections counts that one, so it is left out.
async function metrics (url) {
  const u = new URL(url)
  const text = await new Promise((resolve, reject) => {
    const s = net.connect({ host: u.hostname, port: +u.port })
    let out = ''
    s.on('data', (d) => { out += d })
    s.on('end', () => resolve(out))
    s.on('error', reject)
    s.write(`GET /metrics HTTP/1.1\r\nhost: ${u.host}\r\nconnection: close\r\n\r\n`)
  })
  const get = (name) => {
    const m = new RegExp('^' + name + ' (\\d+)$', 'm').exec(text)
    assert.ok(m, `${name} in /metrics`)
    return +m[1]
  }
  return {
    links: get('queen_ephemeral_client_links'),
    connections: get('queen_ephemeral_connections') - 1,
    parked: get('queen_ephemeral_parked_pops')
  }
}

async function waitFor (what, cond, within = 10000) {
  const deadline = Date.now() + within
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) assert.fail(`${what}: not within ${within} ms`)
    await sleep(10)
  }
}

test('every method on one link, and no HTTP connection', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  assert.deepEqual(await e.configure('l', { maxLength: 100 }), { queue: 'l', options: { maxLength: 100 } })
  assert.deepEqual(await e.push('l', [1, 2, 3], { partition: 'p' }), { pushed: 3 })
  assert.equal((await e.queues()).queues[0].queue, 'l')
  assert.equal((await e.depth('l')).pending, 3)
  const { messages } = await e.pop('l', { group: 'g', batch: 2, wait: true, timeout: 1000 })
  assert.deepEqual(messages.map((m) => m.payload), [1, 2])
  assert.deepEqual((await e.ack('l', messages, { group: 'g' })).results.map((r) => r.outcome), ['acked', 'acked'])
  assert.deepEqual((await e.pop('l', { autoAck: true, batch: 5 })).messages.map((m) => m.payload), [1, 2, 3])
  const start = Date.now()
  assert.deepEqual((await e.pop('l', { group: 'g2', batch: 5, wait: true, timeout: 200 })).messages.length, 3)
  assert.deepEqual((await e.pop('l', { group: 'g', wait: true, timeout: 200 })).messages.map((m) => m.payload), [3])
  assert.deepEqual((await e.pop('l', { group: 'g', wait: true, timeout: 200 })).messages, [])
  assert.ok(Date.now() - start >= 190, 'the empty pop waited')
  assert.deepEqual(await e.reset('l'), { queue: 'l', dropped: 3 })
  assert.deepEqual(await e.delete('l'), { queue: 'l', deleted: true, declared: true })
  await assert.rejects(e.depth('l'), (err) => err instanceof QueenError && err.status === 404 && err.code === Codes.QUEUE_NOT_FOUND)
  await assert.rejects(e.push('', [1]), (err) => err instanceof QueenError && err.status === 400 && err.code === Codes.BAD_REQUEST)
  await assert.rejects(e.push('x'.repeat(513), [1]), (err) => err.status === 400 && err.code === Codes.BAD_REQUEST)

  const ac = new AbortController()
  const responder = e.consume('rpc', (m) => e.reply(m, parseRequest(m).payload + '!'), { autoAck: true, concurrency: 4, wait: 500, signal: ac.signal })
  assert.equal((await e.request('rpc', 'hi', { timeout: 5000 })).payload, 'hi!')
  ac.abort()
  await responder

  assert.deepEqual(await metrics(b.url), { links: 1, connections: 0, parked: 0 })
  assert.equal(queen.transport.conns.size, 0, 'no HTTP/1.1 connection opened')
  assert.equal(queen.transport.links.size, 1)
})

test('a body over 1 MiB goes over HTTP/1.1, the rest stays on the link', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  const big = 'y'.repeat((1 << 20) + 1)
  assert.deepEqual(await e.push('big', [big, 1]), { pushed: 2 })
  assert.equal((await e.pop('big', { batch: 2 })).messages[0].payload, big)
  assert.equal(queen.transport.conns.size, 1, 'the large push on an HTTP connection')
  assert.equal(queen.transport.links.size, 1, 'the pop on the link')
})

test('200 concurrent requests and 4 responders share one TCP connection', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  const ac = new AbortController()
  const responders = Array.from({ length: 4 }, () => e.consume('rpc', (m) => e.reply(m, parseRequest(m).payload * 2), { autoAck: true, concurrency: 16, wait: 500, signal: ac.signal }))
  let during = null
  const calls = Array.from({ length: 200 }, (_, i) => e.request('rpc', i, { timeout: 10000 }))
  during = await metrics(b.url)
  const answers = await Promise.all(calls)
  assert.deepEqual(answers.map((m) => m.payload), Array.from({ length: 200 }, (_, i) => i * 2))
  ac.abort()
  await Promise.all(responders)
  assert.equal(during.links, 1)
  assert.equal(during.connections, 0)
  assert.equal(queen.transport.conns.size, 0)
})

test('10,000 waiting pops on one link; one abort lets them all go on the broker', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  const ac = new AbortController()
  const pops = Array.from({ length: 10000 }, (_, i) => e.pop('many-' + (i % 100), { wait: true, timeout: 60000, signal: ac.signal }))
  await waitFor('10,000 parked', async () => (await metrics(b.url)).parked === 10000, 30000)
  assert.equal((await metrics(b.url)).links, 1)
  // Still a link for short calls, and the one parked for it is answered.
  assert.deepEqual(await e.push('many-7', ['x']), { pushed: 1 })
  ac.abort()
  const settled = await Promise.allSettled(pops)
  assert.equal(settled.filter((s) => s.status === 'fulfilled').length, 1)
  assert.ok(settled.every((s) => s.status === 'fulfilled' || s.reason.name === 'AbortError'))
  await waitFor('cancel frames let them go', async () => (await metrics(b.url)).parked === 0, 30000)
  assert.deepEqual(await metrics(b.url), { links: 1, connections: 0, parked: 0 })
})

test('cancelling a waiting pop, a request() and a timed-out request() frees the broker, the link stays', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  const ac = new AbortController()
  const pop = e.pop('c', { wait: true, timeout: 30000, signal: ac.signal })
  const ac2 = new AbortController()
  const req = e.request('nobody-answers', 'x', { timeout: 30000, signal: ac2.signal })
  await waitFor('two parked', async () => (await metrics(b.url)).parked === 2)
  ac.abort()
  await assert.rejects(pop, (err) => err.name === 'AbortError')
  await waitFor('the pop let go', async () => (await metrics(b.url)).parked === 1)
  ac2.abort()
  await assert.rejects(req, (err) => err.name === 'AbortError')
  await waitFor('the request let go', async () => (await metrics(b.url)).parked === 0)
  await assert.rejects(e.request('nobody-answers', 'x', { timeout: 200 }), RequestTimeoutError)
  assert.deepEqual(await e.push('c', [1]), { pushed: 1 })
  assert.deepEqual(await metrics(b.url), { links: 1, connections: 0, parked: 0 })
})

test('a call past its deadline is cancelled on its stream; the link and the calls beside it go on', async (t) => {
  const srv = await scripted(t, (req, sock) => {
    if (!req.body.includes('silent')) sock.write(answer(201, '{"pushed":1}'))
  }, { link: true })
  const e = client(t, srv.url, { timeout: 300 }).ephemeral
  const start = Date.now()
  const [silent, other] = await Promise.allSettled([e.push('silent', [1]), e.push('q', [1])])
  assert.equal(silent.reason.name, 'TimeoutError')
  assert.ok(Date.now() - start >= 290)
  assert.deepEqual(other.value, { pushed: 1 })
  await waitFor('the cancel frame', () => srv.cancels === 1)
  assert.deepEqual(await e.push('q', [2]), { pushed: 1 })
  assert.equal(srv.links, 1)
})

test('the kill switch with pops parked on a link: answered empty, calls refused 503 ephemeral_disabled, the same link serves after the resume', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  const pops = Array.from({ length: 20 }, (_, i) => e.pop('ks-' + i, { wait: true, timeout: 20000 }))
  await waitFor('20 parked', async () => (await metrics(b.url)).parked === 20)
  const system = (enabled) => fetch(b.url + '/api/v1/system/ephemeral', { method: 'POST', body: JSON.stringify({ enabled, retryAfterSeconds: 2 }) }).then((r) => r.status)
  assert.equal(await system(false), 200)
  for (const r of await Promise.all(pops)) assert.deepEqual(r.messages, [])
  await assert.rejects(e.push('ks-0', [1]), (err) => err instanceof QueenError && err.status === 503 && err.code === Codes.DISABLED && err.retryAfter === 2000)
  assert.equal(await system(true), 200)
  assert.deepEqual(await e.push('ks-0', [1]), { pushed: 1 })
  assert.equal(queen.transport.links.size, 1)
  assert.equal(queen.transport.conns.size, 0)
  assert.equal((await metrics(b.url)).links, 1)
})

// A TCP proxy to target; edit(head) may rewrite each connection's first
// request head, or answer it itself (a string).
async function proxy (t, target, edit) {
  const u = new URL(target)
  const p = { upgrades: 0 }
  const server = net.createServer((c) => {
    c.on('error', () => {})
    let first = Buffer.alloc(0)
    let up = null
    c.on('data', (d) => {
      if (up) return up.write(d)
      first = Buffer.concat([first, d])
      const end = first.indexOf('\r\n\r\n')
      if (end < 0) return
      const head = first.subarray(0, end + 4).toString('latin1')
      if (/^upgrade:/im.test(head)) p.upgrades++
      const out = edit(head)
      if (out.startsWith('HTTP/')) {
        c.end(out)
        return
      }
      up = net.connect({ host: u.hostname, port: +u.port })
      up.on('error', () => c.destroy())
      c.on('close', () => up.destroy())
      up.on('close', () => c.destroy())
      up.pipe(c)
      up.write(Buffer.concat([Buffer.from(out, 'latin1'), first.subarray(end + 4)]))
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  p.url = `http://127.0.0.1:${server.address().port}`
  t.after(() => server.close())
  return p
}

for (const [what, edit] of [
  ['strips the Upgrade header (the broker answers 426)', (head) => head.replace(/^upgrade:.*\r\n/im, '')],
  ['answers the upgrade 400 itself', (head) => /^upgrade:/im.test(head) ? answer(400, '{"error":"no upgrades here"}', 'connection: close\r\n') : head]
]) {
  test(`a proxy that ${what}: HTTP/1.1, remembered for the URL`, async (t) => {
    const b = await startBroker(t)
    const p = await proxy(t, b.url, edit)
    const queen = client(t, p.url)
    const e = queen.ephemeral
    // Calls made before the refusal are sent over HTTP/1.1, once each.
    const [pushed, depth] = await Promise.all([e.push('f', [1]), e.depth('f').catch((err) => err)])
    assert.deepEqual(pushed, { pushed: 1 })
    assert.ok(depth.pending === 1 || depth.code === Codes.QUEUE_NOT_FOUND)
    const ac = new AbortController()
    const responder = e.consume('rpc', (m) => e.reply(m, 'pong'), { autoAck: true, wait: 500, signal: ac.signal })
    assert.equal((await e.request('rpc', 'ping', { timeout: 5000 })).payload, 'pong')
    ac.abort()
    await responder
    assert.deepEqual((await e.pop('f', { autoAck: true })).messages.map((m) => m.payload), [1])
    assert.equal(p.upgrades, 1, 'the upgrade was tried once for the URL')
    const m = await metrics(b.url)
    assert.equal(m.links, 0)
    assert.ok(m.connections >= 1)
  })
}

test('an older broker (404 to the upgrade): HTTP/1.1, the upgrade tried once, and again after linkRetry', async (t) => {
  const srv = await scripted(t, (req, sock) => sock.write(answer(201, '{"pushed":1}')))
  const queen = client(t, srv.url)
  queen.transport.linkRetry = 300
  const e = queen.ephemeral
  const start = Date.now()
  for (let i = 0; i < 3; i++) assert.deepEqual(await Promise.all([e.push('q', [i]), e.push('q', [i])]), [{ pushed: 1 }, { pushed: 1 }])
  if (Date.now() - start < 300) assert.equal(srv.upgrades, 1)
  assert.equal(srv.requests, 6, 'each push sent once')
  // A rolling upgrade behind the URL: once linkRetry has passed, a link is
  // offered again (and here refused again).
  while (Date.now() - start < 350) await sleep(20)
  const before = srv.upgrades
  assert.deepEqual(await e.push('q', [9]), { pushed: 1 })
  assert.equal(srv.upgrades, before + 1)
  assert.equal(srv.requests, 7)
})

test('forceHTTP: no upgrade, HTTP/1.1 connections', async (t) => {
  const srv = await scripted(t, (req, sock) => sock.write(answer(201, '{"pushed":1}')), { link: true })
  const e = client(t, srv.url, { forceHTTP: true }).ephemeral
  assert.deepEqual(await e.push('q', [1]), { pushed: 1 })
  assert.equal(srv.upgrades, 0)
  const b = await startBroker(t)
  const q2 = client(t, b.url, { forceHTTP: true })
  assert.deepEqual(await q2.ephemeral.push('q', [1]), { pushed: 1 })
  assert.equal(q2.transport.links.size, 0)
  assert.deepEqual(await metrics(b.url), { links: 0, connections: 1, parked: 0 })
})

// An HS256 JWT of claims signed with secret.
function hs256 (secret, claims) {
  const enc = (b) => Buffer.from(b).toString('base64url')
  const signed = enc(JSON.stringify({ alg: 'HS256', typ: 'JWT' })) + '.' + enc(JSON.stringify(claims))
  return signed + '.' + createHmac('sha256', secret).update(signed).digest('base64url')
}

test('a refused identity on the upgrade is each call\'s 401, not a fallback to HTTP', async (t) => {
  const secret = 'js-link-secret'
  const b = await startBroker(t, { QUEEN_AUTH_MODE: 'jwt', QUEEN_JWT_SECRET: secret })
  const anonymous = client(t, b.url)
  const unauthorized = (err) => err instanceof QueenError && err.status === 401 && err.code === 'unauthorized'
  await assert.rejects(anonymous.ephemeral.push('jobs', [1]), unauthorized)
  await assert.rejects(anonymous.ephemeral.request('jobs', 1, { timeout: 1000 }), unauthorized)
  assert.equal(anonymous.transport.pools[0].linkMode, 0, 'links not given up for the URL')

  const token = hs256(secret, { tenant: 'acme', role: 'read-write', exp: Math.floor(Date.now() / 1000) + 3600 })
  const e = client(t, b.url, { token }).ephemeral
  assert.deepEqual(await e.push('jobs', [1]), { pushed: 1 })
  assert.equal((await e.pop('jobs', { autoAck: true })).messages.length, 1)
  const reader = client(t, b.url, { token: hs256(secret, { tenant: 'acme', role: 'read', exp: Math.floor(Date.now() / 1000) + 3600 }) }).ephemeral
  await assert.rejects(reader.push('jobs', [1]), (err) => err.status === 403 && err.code === 'forbidden')
  assert.equal(e.queen.transport.pools[0].linkMode, 1, 'on a link')
  assert.equal(e.queen.transport.conns.size, 0)
})

test('a JWT expiring mid-link: a pop parked before exp is served, a call after exp is 401 unauthorized', async (t) => {
  const secret = 'js-link-exp'
  const b = await startBroker(t, { QUEEN_AUTH_MODE: 'jwt', QUEEN_JWT_SECRET: secret })
  const exp = Math.floor(Date.now() / 1000) + 2
  const e = client(t, b.url, { token: hs256(secret, { tenant: 'acme', role: 'read-write', exp }) }).ephemeral
  const other = client(t, b.url, { token: hs256(secret, { tenant: 'acme', role: 'read-write', exp: exp + 3600 }) }).ephemeral
  assert.deepEqual(await e.push('soon', [1]), { pushed: 1 })
  const parked = e.pop('late', { wait: true, timeout: 20000, autoAck: true })
  await sleep(exp * 1000 - Date.now() + 300) // exp is the rule here: a time
  await assert.rejects(e.push('soon', [2]), (err) => err instanceof QueenError && err.status === 401 && err.code === 'unauthorized')
  assert.deepEqual(await other.push('late', ['served']), { pushed: 1 })
  const got = await parked
  assert.deepEqual(got.messages.map((m) => m.payload), ['served'])
})

test('kill -9 of the broker with calls in flight: each reported "may have been applied", none sent again', async (t) => {
  // Exact counts from a scripted link that reads everything, answers the
  // first two pushes, then dies like a killed broker.
  const srv = await scripted(t, (req, sock, n) => {
    if (n <= 2) sock.write(answer(201, '{"pushed":1}'))
  }, { link: true })
  const e = client(t, srv.url).ephemeral
  const calls = [e.push('q', [1]), e.push('q', [2]), e.push('q', [3]), e.ack('q', ['e:1:p:1']), e.pop('q', { wait: true, timeout: 10000, autoAck: true }), e.queues()]
  const results = Promise.allSettled(calls)
  await waitFor('all six read', () => srv.requests === 6)
  for (const s of srv.sockets) s.resetAndDestroy()
  const got = await results
  assert.deepEqual(got.slice(0, 2).map((s) => s.value), [{ pushed: 1 }, { pushed: 1 }])
  for (const s of got.slice(2)) {
    assert.ok(s.reason instanceof ConnectionError, String(s.reason))
    assert.equal(s.reason.sent, true)
    assert.match(s.reason.message, /may have been applied/)
  }
  await sleep(200)
  assert.equal(srv.requests, 6, 'nothing sent again')

  // A real broker: a parked request() and a burst of pushes.
  const b = await startBroker(t)
  const q = client(t, b.url).ephemeral
  await q.push('warm', [0])
  const req = q.request('nobody', 'x', { timeout: 20000 }).then(() => null, (err) => err)
  await waitFor('parked', async () => (await metrics(b.url)).parked === 1)
  const pushes = Array.from({ length: 500 }, (_, i) => q.push('burst', [i]))
  const kill = b.kill()
  const outcomes = await Promise.allSettled(pushes)
  await kill
  const lost = await req
  assert.ok(lost instanceof ConnectionError && lost.sent === true, String(lost))
  for (const o of outcomes) {
    if (o.status === 'fulfilled') assert.deepEqual(o.value, { pushed: 1 })
    else assert.ok(o.reason instanceof ConnectionError && (o.reason.sent ? /may have been applied/.test(o.reason.message) : o.reason.dial), String(o.reason))
  }
  // The broker back on its port: the client opens a new link.
  await b.start(b.port)
  assert.deepEqual(await q.push('after', [1]), { pushed: 1 })
  assert.equal((await metrics(b.url)).links, 1)
})

test('one write: calls made in one tick, and request()\'s push and inbox pop, leave together', async (t) => {
  const reqs = []
  const srv = await scripted(t, (req, sock) => {
    reqs.push(req)
    if (req.path.includes('/push')) return sock.write(answer(201, '{"pushed":1}'))
    sock.write(answer(200, JSON.stringify({ queue: 'i', messages: [{ id: 'e:1:Default:1', partition: 'Default', attempts: 0, payload: 'reply' }] })))
  }, { link: true })
  const e = client(t, srv.url).ephemeral
  await e.push('warm', [0]) // the link is open
  await Promise.all(Array.from({ length: 50 }, (_, i) => e.push('q', [i])))
  assert.equal(new Set(reqs.slice(1).map((r) => r.read)).size, 1, '50 pushes in one read')
  assert.equal((await e.request('rpc', 'x', { timeout: 5000 })).payload, 'reply')
  const [push, pop] = reqs.slice(51)
  assert.ok(push.path.endsWith('/push') && pop.path.includes('/pop?queue=inbox-') && pop.path.includes('wait=true'), `${push.path} ${pop.path}`)
  assert.equal(push.read, pop.read, 'the push and its inbox pop in one read')
  assert.equal(JSON.parse(push.body).messages[0].payload.replyTo, new URL(pop.path, 'http://x').searchParams.get('queue'))
})

test('an open client with an idle link does not keep the process alive; a parked pop does', async (t) => {
  const b = await startBroker(t)
  const index = new URL('../index.js', import.meta.url).href
  const run = (body) => new Promise((resolve) => {
    const script = `import { Queen } from ${JSON.stringify(index)}
const q = new Queen(${JSON.stringify(b.url)})
${body}`
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' })
    const timer = setTimeout(() => { child.kill(); resolve('still running') }, 3000)
    child.on('exit', (code) => { clearTimeout(timer); resolve(code) })
  })
  const [idle, parked] = await Promise.all([
    run("await q.ephemeral.push('u', [1]); if (q.transport.links.size !== 1) process.exit(3)"),
    run("q.ephemeral.pop('nothing', { wait: true, timeout: 20000 })")
  ])
  assert.equal(idle, 0, 'exited once its calls were answered')
  assert.equal(parked, 'still running', 'a parked pop kept it alive')
})

test('the upgrade\'s answer and the frames behind it, one byte per write', async (t) => {
  const trickle = async (sock, bytes) => {
    for (let i = 0; i < bytes.length && !sock.destroyed; i++) {
      sock.write(bytes.subarray(i, i + 1))
      await new Promise((resolve) => setImmediate(resolve))
    }
  }
  const server = net.createServer((sock) => {
    sock.setNoDelay(true)
    sock.on('error', () => {})
    let buf = Buffer.alloc(0)
    let upgraded = false
    sock.on('data', async (d) => {
      buf = Buffer.concat([buf, d])
      if (!upgraded) {
        const end = buf.indexOf('\r\n\r\n')
        if (end < 0) return
        upgraded = true
        buf = buf.subarray(end + 4)
        if (!/authorization: Bearer good/i.test(d.toString())) {
          return trickle(sock, Buffer.from(answer(401, '{"error":"bad token","code":"unauthorized"}')))
        }
        await trickle(sock, Buffer.from('HTTP/1.1 101 Switching Protocols\r\nUpgrade: queen-link/1\r\nConnection: Upgrade\r\n\r\n'))
      }
      while (buf.length >= 13 && buf.length >= 13 + buf.readUInt32BE(0)) {
        const id = buf.readBigUInt64BE(5)
        buf = buf.subarray(13 + buf.readUInt32BE(0))
        const a = Buffer.from(answer(201, `{"pushed":${id}}`))
        const h = Buffer.alloc(13)
        h.writeUInt32BE(a.length, 0)
        h[4] = 2
        h.writeBigUInt64BE(id, 5)
        await trickle(sock, Buffer.concat([h, a]))
      }
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => server.close())
  const url = `http://127.0.0.1:${server.address().port}`
  // ownerRouting off: this server numbers every stream, and the cell's view
  // read (test/cellroute.test.js) would take one.
  const e = client(t, url, { token: 'good', ownerRouting: false }).ephemeral
  assert.deepEqual(await Promise.all([e.push('q', [1]), e.push('q', [2])]), [{ pushed: 0 }, { pushed: 1 }])
  assert.deepEqual(await e.push('q', [3]), { pushed: 2 })
  const bad = client(t, url, { token: 'bad' }).ephemeral
  await assert.rejects(bad.push('q', [1]), (err) => err instanceof QueenError && err.status === 401 && err.code === 'unauthorized' && err.detail === 'bad token')
})

test('refusals on a link: busy is backed off and sent again, lost and too large are reported, never sent again', async (t) => {
  const seen = []
  const srv = await scripted(t, (req, sock, n) => {
    seen.push(req.path)
    const q = JSON.parse(req.body).queue
    if (q === 'busy' && n <= 3) return sock.refuse(1)
    if (q === 'lost') return sock.refuse(4)
    if (q === 'large') return sock.refuse(3)
    sock.write(answer(201, '{"pushed":1}'))
  }, { link: true })
  const e = client(t, srv.url).ephemeral
  assert.deepEqual(await e.push('busy', [1]), { pushed: 1 })
  assert.equal(srv.requests, 4, 'three busy refusals, then served')
  await assert.rejects(e.push('lost', [1]), (err) => err instanceof ConnectionError && err.sent && err.code === 'ERR_LINK_LOST' && /may have been applied/.test(err.message))
  await assert.rejects(e.push('large', [1]), (err) => err instanceof ConnectionError && err.sent && err.code === 'ERR_LINK_TOO_LARGE')
  await sleep(100)
  assert.equal(srv.requests, 6)
  assert.equal(srv.links, 1, 'the link stayed open')
})

test('closing: sent again on a fresh link, and to the next URL when that one is closing too', async (t) => {
  const closing = await scripted(t, (req, sock) => sock.refuse(2), { link: true })
  const once = await scripted(t, (req, sock, n) => n === 1 ? sock.refuse(2) : sock.write(answer(201, '{"pushed":1}')), { link: true })
  const good = await scripted(t, (req, sock) => sock.write(answer(201, '{"pushed":1}')), { link: true })
  assert.deepEqual(await client(t, once.url).ephemeral.push('q', [1]), { pushed: 1 })
  assert.equal(once.requests, 2)
  assert.equal(once.links, 2, 'the second send on a fresh link')
  const queen = client(t, [closing.url, good.url])
  assert.deepEqual(await queen.ephemeral.push('q', [1]), { pushed: 1 })
  assert.equal(closing.requests, 2)
  assert.equal(good.requests, 1)
  assert.equal(queen.url, good.url)
  await assert.rejects(client(t, closing.url).ephemeral.push('q', [1]), (err) => err instanceof ConnectionError && !err.sent && err.code === 'ERR_LINK_CLOSING')
  assert.equal(closing.requests, 4)
})

test('pings keep a link; a link that answers no ping for two is closed and its calls fail as lost', async (t) => {
  const srv = await scripted(t, () => {}, { link: true }) // parks everything
  const queen = client(t, srv.url)
  queen.transport.pingEvery = 50
  const pop = queen.ephemeral.pop('q', { wait: true, timeout: 30000 })
  await waitFor('three pings answered', () => srv.pings >= 3)
  assert.equal(srv.links, 1)
  srv.pong = false
  const start = Date.now()
  await assert.rejects(pop, (err) => err instanceof ConnectionError && err.sent && err.code === 'ERR_LINK_TIMEOUT')
  assert.ok(Date.now() - start < 2000)
})

test('https: the link over TLS, the certificate checked', async (t) => {
  const b = await startBroker(t)
  const cert = readFileSync(new URL('./fixtures/localhost-cert.pem', import.meta.url))
  const key = readFileSync(new URL('./fixtures/localhost-key.pem', import.meta.url))
  const server = tls.createServer({ key, cert }, (c) => {
    const up = net.connect({ host: '127.0.0.1', port: b.port })
    c.on('error', () => up.destroy())
    up.on('error', () => c.destroy())
    c.pipe(up).pipe(c)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => server.close())
  const queen = client(t, `https://127.0.0.1:${server.address().port}`)
  queen.transport.tls = { ca: cert }
  const e = queen.ephemeral
  assert.deepEqual(await Promise.all([e.push('tls', [1]), e.push('tls', [2])]), [{ pushed: 1 }, { pushed: 1 }])
  assert.deepEqual((await e.pop('tls', { batch: 2, autoAck: true })).messages.map((m) => m.payload), [1, 2])
  assert.deepEqual(await metrics(b.url), { links: 1, connections: 0, parked: 0 })
})

test('frames: a request encodes as docs/link.md lays it out; any split of a stream of frames reads the same', () => {
  const f = encodeRequest(258, 'POST', '/api/v1/ephemeral/push', '{"q":"é"}')
  const body = Buffer.from('{"q":"é"}')
  const target = '/api/v1/ephemeral/push'
  assert.equal(f.readUInt32BE(0), f.length - 13)
  assert.equal(f[4], 1)
  assert.equal(f.readBigUInt64BE(5), 258n)
  assert.deepEqual([...f.subarray(13, 18)], [0, 0, 0, 4, ...Buffer.from('P')])
  assert.equal(f.toString('latin1', 17, 21), 'POST')
  assert.equal(f.readUInt32BE(21), target.length)
  assert.equal(f.toString('latin1', 25, 25 + target.length), target)
  assert.equal(f.readUInt32BE(25 + target.length), 0)
  assert.deepEqual(f.subarray(29 + target.length), body)

  const frame = (type, id, payload) => {
    const h = Buffer.alloc(13)
    h.writeUInt32BE(payload.length, 0)
    h[4] = type
    h.writeBigUInt64BE(BigInt(id), 5)
    return Buffer.concat([h, payload])
  }
  const stream = Buffer.concat([
    frame(2, 7, Buffer.from('HTTP/1.1 201 Created\r\nContent-Length: 12\r\n\r\n{"pushed":1}')),
    frame(6, 0, Buffer.alloc(0)),
    frame(4, 2 ** 40 + 3, Buffer.from([1])),
    frame(2, 9, Buffer.from('HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}')),
    frame(2, 11, Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n'))
  ])
  const want = [[2, 7, 201, '{"pushed":1}', ''], [6, 0], [4, 2 ** 40 + 3, 'busy'], [2, 9, 503, '{}', '1'], [2, 11, 200, 'abc', '']]
  for (let size = 1; size <= stream.length; size++) {
    const got = []
    const r = new FrameReader(1 << 20, (type, id, p) => {
      if (type === 2) {
        const a = parseAnswer(p)
        got.push([type, id, a.status, a.body.toString(), a.retryAfter])
      } else if (type === 4) got.push([type, id, refusalServed(p) ? 'maybe served' : 'busy'])
      else got.push([type, id])
    })
    for (let i = 0; i < stream.length; i += size) r.feed(stream.subarray(i, i + size))
    assert.deepEqual(got, want, `pieces of ${size}`)
  }
  assert.throws(() => new FrameReader(100, () => {}).feed(frame(2, 1, Buffer.alloc(101))), /over the limit/)
  assert.throws(() => parseAnswer(Buffer.from('SSH-2.0\r\n\r\n')), /not an HTTP answer/)
  assert.equal(refusalServed(Buffer.from([2])), false)
  assert.equal(refusalServed(Buffer.from([3])), true)
  assert.equal(refusalServed(Buffer.from([9])), true)
  assert.equal(refusalServed(Buffer.alloc(0)), true)
})

test('frames: random bytes make the reader and the answer parser throw FrameError or read frames, nothing else', () => {
  let seed = 7
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n }
  for (let i = 0; i < 3000; i++) {
    const b = Buffer.alloc(rand(64))
    for (let j = 0; j < b.length; j++) b[j] = rand(4) === 0 ? 0 : rand(256)
    if (b.length >= 4 && rand(2) === 0) b.writeUInt32BE(rand(b.length), 0) // a plausible length
    try {
      new FrameReader(1 << 16, (type, id, p) => { if (type === 2) parseAnswer(p) }).feed(b)
    } catch (err) {
      assert.equal(err.name, 'FrameError', String(err))
    }
    try {
      const k = rand(b.length + 1)
      const head = rand(2) ? 'HTTP/1.1 2' : 'HTTP/1.1 '
      const te = rand(3) === 0 ? '\r\ntransfer-encoding: chunked' : ''
      const a = parseAnswer(Buffer.concat([Buffer.from(head), b.subarray(0, k), Buffer.from(te + (rand(2) ? '\r\n\r\n' : '')), b.subarray(k)]))
      assert.ok(a.status >= 200 && a.status <= 599 && Buffer.isBuffer(a.body))
    } catch (err) {
      assert.ok(err.name === 'FrameError' || err.name === 'ProtocolError', String(err))
    }
  }
})

// A TCP proxy to port that counts the connections it is given.
async function countingProxy (t, port) {
  const p = { conns: 0, url: '' }
  const srv = net.createServer((c) => {
    p.conns++
    const up = net.connect({ host: '127.0.0.1', port })
    c.pipe(up)
    up.pipe(c)
    c.on('error', () => up.destroy())
    up.on('error', () => c.destroy())
    c.on('close', () => up.destroy())
    up.on('close', () => c.destroy())
  })
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise((resolve) => { srv.close(resolve); srv.closeAllConnections?.() }))
  p.url = `http://127.0.0.1:${srv.address().port}`
  return p
}

test('a token function: calls over three tokens ride one link, a pop parked before the first exp is answered in the third token, the function called once a token', async (t) => {
  const secret = 'js-link-rotate'
  const b = await startBroker(t, { QUEEN_AUTH_MODE: 'jwt', QUEEN_JWT_SECRET: secret, QUEEN_METRICS_PUBLIC: 'true' })
  const proxy = await countingProxy(t, b.port)
  const exps = []
  let calls = 0
  // Async, as a call to an identity provider would be; each token lives
  // 9 to 10 s (exp has a resolution of a second). Shorter tokens leave too
  // little time between a link's renewal, a quarter of the lifetime before
  // exp, and its retirement, an eighth: on a loaded machine a renewal
  // answered later than that had the link retired and a second dialled.
  const token = async () => {
    calls++
    const exp = Math.floor(Date.now() / 1000) + 10
    exps.push(exp * 1000)
    return hs256(secret, { tenant: 'acme', role: 'read-write', exp, n: calls })
  }
  const e = client(t, proxy.url, { token }).ephemeral
  assert.deepEqual(await e.push('warm', [0]), { pushed: 1 })
  const parked = e.pop('parked', { wait: true, timeout: 30000, autoAck: true })
  await waitFor('the pop parked', async () => (await metrics(b.url)).parked === 1)
  assert.equal(proxy.conns, 1)

  const end = exps[0] + 6000 // past the third token's fetch
  let pushes = 0
  while (Date.now() < end) {
    assert.deepEqual(await e.push('steady', [pushes]), { pushed: 1 }, `push ${pushes}`)
    pushes++
    await sleep(50) // the pace of the pushes, not a wait for a condition
  }
  assert.deepEqual(await e.push('parked', ['late']), { pushed: 1 })
  const got = await parked
  assert.deepEqual(got.messages.map((m) => m.payload), ['late'], 'the pop parked before the first exp')
  assert.equal(proxy.conns, 1, 'one connection throughout')
  assert.ok(calls >= 3 && calls <= 8, `the token function was called ${calls} times for ${pushes} pushes over three tokens; want once a token or so (3 to 8)`)
})

test('a token function over HTTP/1.1 (forceHTTP): its token on every request, fetched again only when due; its failure fails the call with nothing sent once the token in use expired', async (t) => {
  const secret = 'js-http-rotate'
  const b = await startBroker(t, { QUEEN_AUTH_MODE: 'jwt', QUEEN_JWT_SECRET: secret })
  let calls = 0
  let down = false
  const token = () => {
    calls++
    if (down) throw new Error('the identity provider is down')
    return hs256(secret, { tenant: 'acme', role: 'read-write', exp: Math.floor(Date.now() / 1000) + 2 })
  }
  const e = client(t, b.url, { token, forceHTTP: true }).ephemeral
  for (let i = 0; i < 5; i++) assert.deepEqual(await e.push('h', [i]), { pushed: 1 })
  assert.equal(calls, 1, 'one call of the function for five requests')
  down = true
  const first = e.queen.transport.source.cur
  await waitFor('the first token expired', () => Date.now() >= first.exp + 1000, 5000)
  await assert.rejects(e.push('h', [9]), /the token function: the identity provider is down/)
  down = false
  assert.deepEqual(await e.push('h', [10]), { pushed: 1 })
  assert.equal((await e.pop('h', { batch: 100, autoAck: true })).messages.length, 6, 'the push that failed for its token was not sent')
  assert.equal(e.queen.transport.links.size, 0)
})

test('a token function whose fresh token the link refuses: the link is retired before exp and a fresh link takes the calls, none lost', async (t) => {
  const secret = 'js-link-refused'
  const b = await startBroker(t, { QUEEN_AUTH_MODE: 'jwt', QUEEN_JWT_SECRET: secret })
  const proxy = await countingProxy(t, b.port)
  let calls = 0
  let firstExp = 0
  // The second token names another tenant: the broker refuses it on the
  // link (403), and takes it on a new link's upgrade.
  // 7 to 8 s: the link retires about a second before exp, room for a push
  // in flight then to be answered on a loaded machine.
  const token = () => {
    const exp = Math.floor(Date.now() / 1000) + 8
    if (++calls === 1) firstExp = exp * 1000
    return hs256(secret, { tenant: calls === 1 ? 'acme' : 'globex', role: 'read-write', exp })
  }
  const e = client(t, proxy.url, { token }).ephemeral
  assert.deepEqual(await e.push('q', [0]), { pushed: 1 })
  const end = firstExp + 1000
  for (let i = 1; Date.now() < end; i++) {
    assert.deepEqual(await e.push('q', [i]), { pushed: 1 }, `push ${i} at ${Date.now() - firstExp} ms from the first exp`)
    await sleep(20) // the pace of the pushes, not a wait for a condition
  }
  assert.ok(proxy.conns >= 2, `${proxy.conns} connections: no fresh link was dialled for the new token`)
})
