import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { createHmac } from 'node:crypto'
import { Queen, QueenError, FlushError, RequestTimeoutError, ClosedError, Codes, parseRequest } from '../index.js'
import { startBroker, freePort } from './broker.js'
import { scripted } from './scripted.js'

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function client (t, url, options) {
  const q = new Queen(url, options)
  t.after(() => q.close().catch(() => {}))
  return q
}

async function rejectsWith (promise, status, code, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof QueenError, `${what}: ${err}`)
    assert.equal(err.status, status, `${what}: status`)
    assert.equal(err.code, code, `${what}: code`)
    return true
  })
}

test('every method, example 35 and the edges of each verb', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url, { token: 'ignored-in-mode-none', headers: { 'x-test': '1' } })
  const e = queen.ephemeral

  const cfg = await e.configure('presence', { maxLength: 1000, maxBytes: 1048576, policy: 'dropOldest', ttlSeconds: 30, leaseSeconds: 15, retryLimit: 3 })
  assert.deepEqual(cfg, { queue: 'presence', options: { maxLength: 1000, maxBytes: 1048576, policy: 'dropOldest', ttlSeconds: 30, leaseSeconds: 15, retryLimit: 3 } })

  assert.deepEqual(await e.push('presence', [{ user: 'alice', typing: true }, { user: 'bob', typing: true }], { partition: 'room-7' }), { pushed: 2 })
  assert.deepEqual(await e.push('presence', [], { partition: 'room-7' }), { pushed: 0 })

  const qs = await e.queues()
  assert.equal(qs.count, 1)
  assert.equal(qs.queues[0].queue, 'presence')
  assert.equal(qs.queues[0].tier, 'declared')
  assert.equal(qs.queues[0].depth, 2)
  assert.equal(qs.queues[0].options.windowBuffer, null)

  const d = await e.depth('presence')
  assert.equal(d.group, null)
  assert.equal(d.pending, 2)
  assert.deepEqual(d.partitions.map((p) => p.partition), ['room-7'])

  const { messages } = await e.pop('presence', { partition: 'room-7', group: 'widget', batch: 10, wait: true, timeout: 2000 })
  assert.equal(messages.map((m) => m.payload.user).join(', '), 'alice, bob')
  assert.equal(messages[0].attempts, 0)
  assert.equal((await e.depth('presence', { group: 'widget' })).group, 'widget')

  const { results } = await e.ack('presence', messages, { group: 'widget' })
  assert.deepEqual(results.map((r) => r.outcome), ['acked', 'acked'])
  assert.equal(results[0].id, messages[0].id)
  assert.deepEqual((await e.ack('presence', [messages[0].id], { group: 'widget' })).results.map((r) => r.outcome), ['unknown'])

  const audit = await e.pop('presence', { partition: 'room-7', group: 'audit', batch: 10 })
  assert.equal(audit.messages.length, 2)
  assert.equal((await e.ack('presence', audit.messages.slice(0, 1), { group: 'audit', status: 'failed' })).results[0].outcome, 'redelivered')
  await e.ack('presence', audit.messages.slice(1), { group: 'audit', status: 'completed' })
  const again = await e.pop('presence', { partition: 'room-7', group: 'audit', batch: 10 })
  assert.equal(again.messages.length, 1)
  assert.equal(again.messages[0].attempts, 1)
  assert.equal(again.messages[0].id, audit.messages[0].id)

  const start = Date.now()
  const empty = await e.pop('presence', { group: 'widget', wait: true, timeout: 200 })
  assert.deepEqual(empty.messages, [])
  assert.ok(Date.now() - start >= 150, 'a waiting pop waited')

  assert.equal((await e.pop('presence', { batch: 10, autoAck: true })).messages.length, 2)

  assert.deepEqual(await e.reset('presence'), { queue: 'presence', dropped: 2 })
  assert.deepEqual(await e.delete('presence'), { queue: 'presence', deleted: true, declared: true })
  assert.deepEqual(await e.delete('presence'), { queue: 'presence', deleted: false, declared: false })
  assert.deepEqual(await e.reset('never-there'), { queue: 'never-there', dropped: 0 })

  await e.push('a/b c?', [1])
  assert.equal((await e.depth('a/b c?')).pending, 1)
  assert.equal((await e.delete('a/b c?')).deleted, true)
})

test('every refusal a broker in mode none gives', async (t) => {
  const b = await startBroker(t)
  const e = client(t, b.url).ephemeral
  await rejectsWith(e.push('', [1]), 400, Codes.BAD_REQUEST, 'push without queue')
  await rejectsWith(e.pop('bad\x01name'), 400, Codes.BAD_REQUEST, 'control character')
  await rejectsWith(e.configure('q', { ttlSecond: 1 }), 400, Codes.BAD_REQUEST, 'unknown option')
  await rejectsWith(e.configure('q', { ttlSeconds: 1.5 }), 400, Codes.BAD_REQUEST, 'non-integer bound')
  await rejectsWith(e.push('x'.repeat(513), [1]), 400, Codes.BAD_REQUEST, 'name over 512 bytes')
  await rejectsWith(e.push('q', Array.from({ length: 10001 }, (_, i) => i)), 400, Codes.BAD_REQUEST, '10,001 messages')
  await rejectsWith(e.depth('nope'), 404, Codes.QUEUE_NOT_FOUND, 'depth of a missing queue')

  await e.configure('tiny', { maxLength: 1, policy: 'reject' })
  await e.push('tiny', [1])
  await rejectsWith(e.push('tiny', [2]), 429, Codes.QUEUE_FULL, 'full reject queue')

  const old = client(t, b.url + '/old-proxy').ephemeral
  for (const [name, call] of Object.entries({
    configure: () => old.configure('q', {}),
    push: () => old.push('q', [1]),
    pop: () => old.pop('q'),
    ack: () => old.ack('q', ['x']),
    reset: () => old.reset('q'),
    delete: () => old.delete('q'),
    queues: () => old.queues(),
    depth: () => old.depth('q')
  })) {
    await rejectsWith(call(), 404, Codes.UNSUPPORTED, `${name} through an old proxy`)
  }

  const dead = client(t, `http://127.0.0.1:${await freePort()}`).ephemeral
  await assert.rejects(dead.queues(), (err) => !(err instanceof QueenError))
  assert.throws(() => new Queen('localhost:6632'), TypeError)
})

test('503 at the broker total, 403 at the tenant queue allowance', async (t) => {
  const b = await startBroker(t, {
    // The total counts each queue's charges too (about 700 bytes for a
    // queue with one small message; docs/engine.md, "What the budgets
    // count"), and connections are left out (their number is the client's).
    // A refused push leaves no queue, so an allowance of one admits "two".
    QUEEN_EPHEMERAL_MAX_BYTES: '1024',
    QUEEN_CONNECTION_CHARGE_BYTES: '0',
    QUEEN_EPHEMERAL_CEILING_MAX_BYTES: '1048576',
    QUEEN_EPHEMERAL_QUEUE_MAX_BYTES: '1048576',
    QUEEN_EPHEMERAL_TENANT_MAX_QUEUES: '1'
  })
  const e = client(t, b.url).ephemeral
  await rejectsWith(e.push('one', ['x'.repeat(2000)]), 503, Codes.UNAVAILABLE, 'past QUEEN_EPHEMERAL_MAX_BYTES')
  await e.push('two', [1])
  await rejectsWith(e.push('three', [1]), 403, Codes.QUOTA_EXCEEDED, 'past the queue allowance')
})

test('buffered push under backpressure: nothing lost, nothing duplicated', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url, { buffer: { messageCount: 8, timeMillis: 5, maxPending: 16, maxBackoff: 20 } })
  const e = queen.ephemeral
  await e.configure('bp', { maxLength: 5, policy: 'reject' })
  const n = 400
  const seen = []
  const consumer = (async () => {
    while (seen.length < n) {
      const { messages } = await e.pop('bp', { group: 'g', batch: 3, wait: true, timeout: 1000 })
      for (const m of messages) seen.push(m.payload)
      await sleep(1)
      await e.ack('bp', messages, { group: 'g' })
    }
  })()
  for (let i = 0; i < n; i++) {
    await e.push('bp', [i], { buffered: true })
  }
  await e.flush()
  await consumer
  assert.deepEqual(seen, Array.from({ length: n }, (_, i) => i))
  assert.ok(e.flushRetries > 0, 'a flush met queue_full')
  const qs = await e.queues()
  assert.deepEqual(qs.queues[0].drops, { bounds: 0, ttl: 0, retry: 0 })
})

test('the buffer holds at most maxPending messages: the next push waits for room', async (t) => {
  // A broker that reads the requests and never answers: nothing leaves the buffer.
  const srv = await scripted(t, () => new Promise(() => {}))
  // The call timeout and retryTimeout only let the client close when the test ends.
  const e = client(t, srv.url, { timeout: 1000, buffer: { messageCount: 4, timeMillis: 1, maxPending: 16, retryTimeout: 1000 } }).ephemeral
  for (let i = 0; i < 16; i++) assert.deepEqual(await e.push('q', [i], { buffered: true }), { pushed: 1 })
  const next = e.push('q', ['one too many'], { buffered: true }).then(() => 'pushed', () => 'rejected')
  const outcome = await Promise.race([next, sleep(200).then(() => 'waiting')])
  assert.equal(outcome, 'waiting', 'the 17th buffered push did not wait for room')
})

test('a flush that finally fails is reported, never dropped silently', async (t) => {
  const b = await startBroker(t)
  const handled = []
  // timeMillis 100, not 1: with 1 ms, the clock could tick between the first
  // message's arrival and the runner's look at its age, and the three
  // messages below then left as two batches (two FlushErrors).
  const queen = client(t, b.url, { buffer: { messageCount: 10, timeMillis: 100, retryTimeout: 150, maxBackoff: 20 }, onFlushError: (fe) => handled.push(fe) })
  const e = queen.ephemeral
  await e.configure('full', { maxLength: 1, policy: 'reject' })
  await e.push('full', [0])
  await e.push('full', [1, 2, 3], { buffered: true })
  await assert.rejects(e.flush(), (err) => {
    assert.ok(err instanceof FlushError, `${err?.stack} ${err?.errors?.map(String)}`)
    assert.equal(err.queue, 'full')
    assert.equal(err.messages, 3)
    assert.equal(err.status, 429)
    assert.equal(err.code, Codes.QUEUE_FULL)
    assert.ok(err.cause instanceof QueenError)
    return true
  })
  await e.flush() // reported once

  await e.push('bad\x01', [1], { buffered: true })
  const deadline = Date.now() + 5000
  for (;;) {
    try {
      await e.push('bad\x01', [2], { buffered: true })
    } catch (err) {
      assert.ok(err instanceof FlushError)
      assert.equal(err.status, 400)
      assert.equal(err.code, Codes.BAD_REQUEST)
      break
    }
    assert.ok(Date.now() < deadline, 'the failed flush was reported')
    await sleep(10)
  }
  await sleep(10)
  assert.ok(handled.length >= 2)
})

test('a flush honours Retry-After', async (t) => {
  let calls = 0
  const times = []
  const srv = http.createServer((req, res) => {
    req.resume()
    if (req.url.endsWith('/link')) { // an older broker: no links
      res.writeHead(404).end()
      return
    }
    req.on('end', () => {
      calls++
      times.push(Date.now())
      res.setHeader('content-type', 'application/json')
      if (calls === 1) {
        res.writeHead(429, { 'retry-after': '1' })
        res.end('{"error":"slow down","code":"rate_limited"}')
      } else {
        res.writeHead(201)
        res.end('{"pushed":1}')
      }
    })
  })
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve))
  t.after(() => srv.close())
  const url = `http://127.0.0.1:${srv.address().port}`
  // ownerRouting off: this server counts every request as a push, the
  // cell's view read (test/cellroute.test.js) included.
  const e = client(t, url, { buffer: { timeMillis: 1 }, ownerRouting: false }).ephemeral
  await assert.rejects(e.push('q', [1]), (err) => err.status === 429 && err.code === Codes.RATE_LIMITED && err.retryAfter === 1000)
  calls = 0
  times.length = 0
  await e.push('q', [1], { buffered: true })
  await e.flush()
  assert.equal(calls, 2)
  assert.ok(times[1] - times[0] >= 950, `retried after ${times[1] - times[0]} ms`)
})

test('request/reply with 100 concurrent requesters', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  const ac = new AbortController()
  const responder = e.consume('rpc', async (m) => {
    const { payload } = parseRequest(m)
    await e.reply(m, { n: payload, double: payload * 2 })
  }, { group: 'workers', concurrency: 16, wait: 1000, signal: ac.signal })
  const replies = await Promise.all(Array.from({ length: 100 }, (_, i) => e.request('rpc', i, { timeout: 10000 })))
  replies.forEach((r, i) => assert.deepEqual(r.payload, { n: i, double: 2 * i }))
  ac.abort()
  await responder

  const start = Date.now()
  await assert.rejects(e.request('nobody-listens', 'hello', { timeout: 300 }), RequestTimeoutError)
  assert.ok(Date.now() - start >= 250)
  await assert.rejects(e.reply({ payload: { x: 1 } }, 1), TypeError)
})

test('consume: bounded concurrency, failed then completed, stops on abort and on close', async (t) => {
  const b = await startBroker(t)
  const queen = client(t, b.url)
  const e = queen.ephemeral
  const n = 20
  for (let i = 0; i < n; i++) await e.push('jobs', [i], { partition: `p${i % 3}` })
  const completed = new Map()
  let failedOnce = 0
  let running = 0
  let peak = 0
  const ac = new AbortController()
  await e.consume('jobs', async (m) => {
    running++
    peak = Math.max(peak, running)
    try {
      await sleep(2)
      if (m.payload % 5 === 0 && m.attempts === 0) {
        failedOnce++
        throw new Error('first attempt fails')
      }
      completed.set(m.payload, (completed.get(m.payload) ?? 0) + 1)
      if (completed.size === n) ac.abort()
    } finally {
      running--
    }
  }, { group: 'g', concurrency: 4, batch: 8, wait: 200, signal: ac.signal })
  for (let i = 0; i < n; i++) assert.equal(completed.get(i), 1, `message ${i}`)
  assert.equal(failedOnce, 4)
  assert.ok(peak <= 4, `peak ${peak}`)
  assert.equal((await e.depth('jobs', { group: 'g' })).pending, 0)

  const q2 = new Queen(b.url)
  const loop = q2.ephemeral.consume('idle', async () => {}, { wait: 5000 })
  await sleep(100)
  const start = Date.now()
  await q2.close()
  await loop
  assert.ok(Date.now() - start < 2000, 'close stopped the loop')
  await assert.rejects(q2.ephemeral.push('idle', [1]), ClosedError)
})

test('close flushes buffered pushes', async (t) => {
  const b = await startBroker(t)
  const queen = new Queen(b.url, { buffer: { messageCount: 1000, timeMillis: 3600000 } })
  for (let i = 0; i < 250; i++) await queen.ephemeral.push('later', [i], { buffered: true, partition: `p${i % 2}` })
  await queen.close()
  assert.equal((await client(t, b.url).ephemeral.depth('later')).pending, 250)
})

test('acks after a broker restart are stale, through failover to the new address', async (t) => {
  const b = await startBroker(t)
  const port2 = await freePort()
  const queen = client(t, [b.url, `http://127.0.0.1:${port2}`])
  const e = queen.ephemeral
  await e.configure('kept', { maxLength: 100 })
  await e.push('kept', [1, 2, 3])
  const { messages } = await e.pop('kept', { group: 'g', batch: 3 })
  assert.equal(messages.length, 3)
  await b.stop()
  await b.start(port2)
  const { results } = await e.ack('kept', messages, { group: 'g' })
  assert.deepEqual(results, messages.map((m) => ({ id: m.id, outcome: 'stale' })))
  assert.equal(queen.url, `http://127.0.0.1:${port2}`)
  const d = await e.depth('kept')
  assert.equal(d.tier, 'declared')
  assert.equal(d.pending, 0)
})

test('consume with autoAck: request/reply with no ack calls; a failing handler is reported, not redelivered', async (t) => {
  const b = await startBroker(t)
  const e = client(t, b.url).ephemeral
  const ac = new AbortController()
  const errors = []
  let calls = 0
  const origAck = e.ack
  e.ack = (...args) => { calls++; return origAck.apply(e, args) }
  const responder = e.consume('rpc-auto', async (m) => {
    const { payload } = parseRequest(m)
    if (payload === 'boom') throw new Error('boom')
    await e.reply(m, payload * 3)
  }, { group: 'workers', concurrency: 8, wait: 500, autoAck: true, signal: ac.signal, onError: (err) => errors.push(err) })
  const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => e.request('rpc-auto', i, { timeout: 5000 })))
  replies.forEach((r, i) => assert.equal(r.payload, i * 3))
  await assert.rejects(e.request('rpc-auto', 'boom', { timeout: 500 }), RequestTimeoutError)
  ac.abort()
  await responder
  assert.equal(calls, 0, 'no ack call')
  assert.deepEqual(errors.map((err) => err.message), ['boom'])
  assert.equal((await e.depth('rpc-auto', { group: 'workers' })).pending, 0, 'nothing left to redeliver')
})

// An HS256 JWT of claims signed with secret.
function hs256 (secret, claims) {
  const enc = (b) => Buffer.from(b).toString('base64url')
  const signed = enc(JSON.stringify({ alg: 'HS256', typ: 'JWT' })) + '.' + enc(JSON.stringify(claims))
  return signed + '.' + createHmac('sha256', secret).update(signed).digest('base64url')
}

test('the token is sent as a bearer credential: a jwt-mode broker serves its tenant, refuses none', async (t) => {
  const secret = 'js-token-test-secret'
  const b = await startBroker(t, { QUEEN_AUTH_MODE: 'jwt', QUEEN_JWT_SECRET: secret })
  const token = hs256(secret, { tenant: 'acme', role: 'read-write', exp: Math.floor(Date.now() / 1000) + 3600 })
  const e = client(t, b.url, { token }).ephemeral
  assert.deepEqual(await e.push('jobs', [1]), { pushed: 1 })
  const popped = await e.pop('jobs', { autoAck: true })
  assert.equal(popped.messages.length, 1)

  const anonymous = client(t, b.url).ephemeral
  await rejectsWith(anonymous.push('jobs', [1]), 401, 'unauthorized', 'push without a token')
})

test('buffer.retryTimeout means what the Go SDK\'s RetryTimeout means: 0 is the default, negative is forever', async (t) => {
  const of = (retryTimeout) => client(t, 'http://127.0.0.1:1', { buffer: { retryTimeout } }).ephemeral.buffer.retryTimeout
  assert.equal(of(undefined), 30000)
  assert.equal(of(0), 30000)
  assert.equal(of(-1), -1)
  assert.equal(of(250), 250)
})
