// Cell refusals (lib/cellretry.js, docs/sdk-transport-js.md "Cell
// refusals"): a scripted broker on a real TCP listener answers 503
// owner_moved or 503 ephemeral_forward_failed (which only a cell of several
// brokers sends) a few times and then serves; every test counts exactly
// what it was sent.

import { test as nodeTest } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Queen, QueenError, Codes } from '../index.js'
import { scripted, answer } from './scripted.js'
import { startBroker } from './broker.js'

const API = '/api/v1/ephemeral'
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const CELL = [Codes.OWNER_MOVED, Codes.FORWARD_FAILED]
const SLACK = 250

function baseClient (t, url, options) {
  const q = new Queen(url, options)
  t.after(() => q.close().catch(() => {}))
  return q
}

// A scripted broker: handle(r, nth) answers each request r = {route, query,
// body, at}, nth counting the requests of its route (1 for the first).
async function baseCellBroker (t, handle, link) {
  const reqs = []
  const counts = new Map()
  const srv = await scripted(t, async (req, sock) => {
    const u = new URL(req.path, 'http://x')
    const route = u.pathname.slice(API.length)
    const nth = (counts.get(route) ?? 0) + 1
    counts.set(route, nth)
    const r = { route, query: u.searchParams, body: req.body, at: Date.now() }
    reqs.push(r)
    const out = await handle(r, nth)
    if (!sock.destroyed) sock.write(out)
  }, { link })
  srv.sent = (route) => reqs.filter((r) => r.route === route)
  // Nothing more reaches the broker on route after the call returned.
  srv.settled = async (route, want) => {
    await sleep(100)
    assert.equal(srv.sent(route).length, want, `${route}: requests`)
    assert.equal(srv.links > 0, link, link ? 'the calls went on a link' : 'no link was opened')
  }
  return srv
}

function refusal (code, retryAfter) {
  return answer(503, JSON.stringify({ error: 'the cell is moving', code }), retryAfter ? `retry-after: ${retryAfter}\r\n` : '')
}

const popOne = JSON.stringify({ queue: 'q', messages: [{ id: 'e:1:Default:1', partition: 'Default', attempts: 0, payload: 7 }] })

const verbs = [
  {
    name: 'push',
    route: '/push',
    ok: answer(201, '{"pushed":2}'),
    call: async (e) => assert.deepEqual(await e.push('q', [1, 2]), { pushed: 2 })
  },
  {
    name: 'pop',
    route: '/pop',
    ok: answer(200, popOne),
    call: async (e) => assert.equal((await e.pop('q', { group: 'g', batch: 1 })).messages[0].id, 'e:1:Default:1')
  },
  {
    name: 'waiting pop',
    route: '/pop',
    ok: answer(200, popOne),
    call: async (e) => assert.equal((await e.pop('q', { wait: true, timeout: 5000 })).messages.length, 1)
  },
  {
    name: 'ack',
    route: '/ack',
    ok: answer(200, '{"results":[{"id":"e:1:Default:1","outcome":"stale"}]}'),
    call: async (e) => assert.equal((await e.ack('q', ['e:1:Default:1'], { group: 'g' })).results[0].outcome, 'stale')
  }
]

// Every test runs twice: over a link (the scripted broker speaks it,
// test/scripted.js) and over HTTP/1.1 (forceHTTP).
for (const mode of ['link', 'http']) {
  const test = (name, fn) => nodeTest(`${name} [${mode}]`, fn)
  const client = (t, url, options) => baseClient(t, url, { ...options, forceHTTP: mode === 'http' })
  const cellBroker = (t, handle) => baseCellBroker(t, handle, mode === 'link')

  for (const v of verbs) {
    for (const code of CELL) {
      test(`${v.name} refused ${code} three times: sent exactly four times, with backoff, never after the success`, async (t) => {
        const b = await cellBroker(t, (r, nth) => nth <= 3 ? refusal(code) : v.ok)
        await v.call(client(t, b.url).ephemeral)
        await b.settled(v.route, 4)
        const sent = b.sent(v.route)
        for (let i = 1; i < sent.length; i++) {
          // Jitter keeps a wait within [backoff/2, backoff], from 10 ms doubling.
          const least = (10 << (i - 1)) / 2
          assert.ok(sent[i].at - sent[i - 1].at >= least - 1, `send ${i + 1} came ${sent[i].at - sent[i - 1].at} ms after the previous, want ${least}`)
          assert.equal(sent[i].body, sent[0].body)
          if (v.name !== 'waiting pop') {
            assert.equal(sent[i].query.toString(), sent[0].query.toString())
            continue
          }
          const prev = +sent[i - 1].query.get('timeout')
          const cur = +sent[i].query.get('timeout')
          assert.ok(sent[i].query.get('wait') === 'true' && cur < prev && cur >= 4500, `re-issued with ${sent[i].query} after ${prev}`)
        }
        if (v.name === 'waiting pop') assert.equal(sent[0].query.get('timeout'), '5000')
      })
    }
  }

  for (const route of ['/push', '/pop']) {
    test(`${route === '/push' ? 'push' : 'waiting pop'} refused with Retry-After: sent again no sooner`, async (t) => {
      const b = await cellBroker(t, (r, nth) => {
        if (nth === 1) return refusal(Codes.FORWARD_FAILED, '1')
        return r.route === '/push' ? answer(201, '{"pushed":1}') : answer(200, popOne)
      })
      const e = client(t, b.url).ephemeral
      if (route === '/push') await e.push('q', [1])
      else await e.pop('q', { wait: true, timeout: 10000 })
      await b.settled(route, 2)
      const sent = b.sent(route)
      const gap = sent[1].at - sent[0].at
      assert.ok(gap >= 990 && gap < 3000, `sent again after ${gap} ms, Retry-After said 1 s`)
      if (route === '/pop') {
        const ms = +sent[1].query.get('timeout')
        assert.ok(ms <= 9010 && ms >= 7000, `re-issued with timeout=${ms} after waiting 1 s of 10 s`)
      }
    })
  }

  // The retries end with the last refusal (its code, and how many sends it
  // took) when the call's bound ends first, and nothing is sent after.
  async function bounded (b, route, promise, code, within) {
    const start = Date.now()
    const err = await promise.then(() => null, (e) => e)
    const took = Date.now() - start
    assert.ok(err instanceof QueenError, String(err))
    assert.equal(err.status, 503)
    assert.equal(err.code, code)
    // SLACK: the last send's round trip on a shared, loaded machine (and,
    // on a link, the upgrade's before the first); a bound not kept would
    // run on to the client's 30 s.
    assert.ok(took <= within + SLACK, `gave up after ${took} ms, want within ${within} (+${SLACK})`)
    const n = b.sent(route).length
    assert.ok(n >= 2, `${n} sends`)
    assert.equal(err.attempts, n)
    await b.settled(route, n)
  }

  test('the client timeout bounds the retries of a push: the last refusal, its code kept', async (t) => {
    const b = await cellBroker(t, () => refusal(Codes.OWNER_MOVED))
    const e = client(t, b.url, { timeout: 300 }).ephemeral
    await bounded(b, '/push', e.push('q', [1]), Codes.OWNER_MOVED, 400)
  })

  test('the client timeout bounds the retries of an ack', async (t) => {
    const b = await cellBroker(t, () => refusal(Codes.FORWARD_FAILED))
    const e = client(t, b.url, { timeout: 250 }).ephemeral
    await bounded(b, '/ack', e.ack('q', ['x']), Codes.FORWARD_FAILED, 350)
  })

  test("a waiting pop's timeout bounds its retries, each re-issued with what is left", async (t) => {
    const b = await cellBroker(t, () => refusal(Codes.OWNER_MOVED))
    const e = client(t, b.url).ephemeral
    await bounded(b, '/pop', e.pop('q', { wait: true, timeout: 300 }), Codes.OWNER_MOVED, 400)
    let prev = 301
    for (const r of b.sent('/pop')) {
      const ms = +r.query.get('timeout')
      assert.ok(ms < prev && ms >= 1, `timeouts of the re-issued pops: ${ms} after ${prev}`)
      prev = ms
    }
  })

  test("the broker's Retry-After: 1 past the client timeout: sent once more at the end of the bound, not given up at once", async (t) => {
    const b = await cellBroker(t, () => refusal(Codes.OWNER_MOVED, '1'))
    const e = client(t, b.url, { timeout: 400 }).ephemeral
    const start = Date.now()
    await bounded(b, '/push', e.push('q', [1]), Codes.OWNER_MOVED, 500)
    // From the call's start: the first send's own round trip (slow on a
    // loaded machine) is part of the bound.
    const sent = b.sent('/push')
    assert.ok(sent[1].at - start >= 300, `sent again ${sent[1].at - start} ms into the call, want at the end of the bound (about 350 ms)`)
  })

  test("request()'s timeout bounds the retries of its push", async (t) => {
    const b = await cellBroker(t, (r) => r.route === '/push' ? refusal(Codes.FORWARD_FAILED) : answer(200, '{"queue":"x","messages":[]}'))
    const e = client(t, b.url).ephemeral
    await bounded(b, '/push', e.request('rpc', 'hi', { timeout: 300 }), Codes.FORWARD_FAILED, 400)
  })

  test('a signal that aborts during a wait ends the retries at once with the refusal', async (t) => {
    const b = await cellBroker(t, () => refusal(Codes.OWNER_MOVED, '5'))
    const e = client(t, b.url).ephemeral
    const start = Date.now()
    // The signal aborts a second in, well into the 5 s the refusal asked for.
    const err = await e.pop('q', { signal: AbortSignal.timeout(1000) }).then(() => null, (e) => e)
    assert.ok(err instanceof QueenError && err.code === Codes.OWNER_MOVED && err.attempts === 1, String(err))
    assert.ok(Date.now() - start < 3000, `took ${Date.now() - start} ms`)
    await b.settled('/pop', 1)
  })

  for (const [status, code] of [[503, Codes.UNAVAILABLE], [503, Codes.DISABLED], [429, Codes.RATE_LIMITED], [429, Codes.QUEUE_FULL], [503, '']]) {
    test(`${status} ${code || '(no code)'} is answered at once, sent once`, async (t) => {
      const b = await cellBroker(t, () => answer(status, JSON.stringify({ error: 'no', code }), 'retry-after: 1\r\n'))
      const e = client(t, b.url).ephemeral
      const err = await e.push('q', [1]).then(() => null, (e) => e)
      assert.ok(err instanceof QueenError && err.status === status && err.code === code && err.attempts === 1, String(err))
      await b.settled('/push', 1)
    })
  }

  const replyAnswer = answer(200, JSON.stringify({ queue: 'i', messages: [{ id: 'e:1:Default:1', partition: 'Default', attempts: 0, payload: 'answer' }] }))
  const inboxOf = (r) => JSON.parse(r.body).messages[0].payload.replyTo

  test('request() whose push is refused by the cell is pushed again with a fresh inbox', async (t) => {
    let accepted = null
    const b = await cellBroker(t, (r, nth) => {
      if (r.route === '/push') {
        if (nth <= 2) return refusal(CELL[nth - 1])
        accepted = inboxOf(r)
        return answer(201, '{"pushed":1}')
      }
      if (accepted && r.query.get('queue') === accepted) return replyAnswer
      return answer(200, '{"queue":"x","messages":[]}') // the pop behind a refused push
    })
    const m = await client(t, b.url).ephemeral.request('rpc', 'hi', { timeout: 5000 })
    assert.equal(m.payload, 'answer')
    await b.settled('/push', 3)
    assert.equal(new Set(b.sent('/push').map(inboxOf)).size, 3, 'a fresh inbox per push')
    assert.equal(b.sent('/pop').filter((r) => r.query.get('queue') === accepted).length, 1)
  })

  test('request() whose inbox pop is refused by the cell parks again, the request is not pushed again', async (t) => {
    const b = await cellBroker(t, (r, nth) => {
      if (r.route === '/push') return answer(201, '{"pushed":1}')
      return nth <= 2 ? refusal(Codes.FORWARD_FAILED) : replyAnswer
    })
    const m = await client(t, b.url).ephemeral.request('rpc', 'hi', { timeout: 5000 })
    assert.equal(m.payload, 'answer')
    await b.settled('/push', 1)
    await b.settled('/pop', 3)
    const inbox = inboxOf(b.sent('/push')[0])
    for (const r of b.sent('/pop')) {
      assert.ok(r.query.get('queue') === inbox && r.query.get('wait') === 'true' && r.query.get('autoAck') === 'true', String(r.query))
    }
  })

  const pushed = (r) => JSON.parse(r.body).messages.map((m) => m.payload)

  test('buffered pushes drain through cell refusals: each message appended once, in order', async (t) => {
    // By push request: the cell refuses 1, 3, 4 and 7, and 6 is a queue_full
    // (its batch of 4 then goes as 2 and 2).
    const script = { 1: Codes.OWNER_MOVED, 3: Codes.FORWARD_FAILED, 4: Codes.OWNER_MOVED, 6: Codes.QUEUE_FULL, 7: Codes.OWNER_MOVED }
    const appended = []
    const b = await cellBroker(t, (r, nth) => {
      const code = script[nth]
      if (code === Codes.QUEUE_FULL) return answer(429, '{"error":"full","code":"queue_full"}')
      if (code) return refusal(code)
      appended.push(...pushed(r))
      return answer(201, JSON.stringify({ pushed: pushed(r).length }))
    })
    const queen = client(t, b.url, { buffer: { messageCount: 4, timeMillis: 3600000 } })
    const payloads = Array.from({ length: 20 }, (_, i) => i)
    await queen.ephemeral.push('q', payloads, { buffered: true })
    await queen.ephemeral.flush()
    await b.settled('/push', 11) // 5 batches, one halved: 6 accepted, 5 refused
    assert.deepEqual(appended, payloads)
    assert.equal(queen.ephemeral.flushRetries, 5)
    const sent = b.sent('/push')
    for (const [nth, code] of Object.entries(script)) {
      if (code !== Codes.QUEUE_FULL) assert.equal(sent[nth].body, sent[nth - 1].body, `push ${nth} refused ${code}, sent again whole`)
    }
  })

  test('buffered pushes drain through a membership change (300 ms of refusals)', async (t) => {
    const appended = []
    let first = 0
    let refused = 0
    let accepted = 0
    const b = await cellBroker(t, (r, nth) => {
      if (nth === 1) first = r.at
      if (r.at - first < 300) {
        refused++
        return refusal(CELL[nth % 2])
      }
      appended.push(...pushed(r))
      accepted++
      return answer(201, JSON.stringify({ pushed: pushed(r).length }))
    })
    const queen = client(t, b.url, { buffer: { messageCount: 10, timeMillis: 5, maxPending: 30 } })
    const want = []
    for (let i = 0; i < 100; i++) {
      // One at a time, waiting while 30 are held: held back, never dropped.
      await queen.ephemeral.push('q', [i], { buffered: true })
      want.push(i)
    }
    await queen.ephemeral.flush()
    await sleep(50)
    assert.deepEqual(appended, want)
    assert.ok(refused >= 3, `${refused} refused`)
    assert.equal(queen.ephemeral.flushRetries, refused)
    assert.equal(b.sent('/push').length, refused + accepted)
  })

  test('a consume loop goes through refused pops and acks: each message handled and acked once, onError silent', async (t) => {
    const two = JSON.stringify({
      queue: 'q',
      messages: [
        { id: 'e:1:Default:1', partition: 'Default', attempts: 0, payload: 1 },
        { id: 'e:1:Default:2', partition: 'Default', attempts: 0, payload: 2 }
      ]
    })
    const b = await cellBroker(t, async (r, nth) => {
      if (r.route === '/pop') {
        if (nth <= 2) return refusal(CELL[nth - 1])
        if (nth === 3) return answer(200, two)
        await sleep(Math.min(+r.query.get('timeout'), 50))
        return answer(200, '{"queue":"q","messages":[]}')
      }
      if (nth === 1) return refusal(Codes.FORWARD_FAILED)
      return answer(200, JSON.stringify({ results: [{ id: JSON.parse(r.body).acks[0].id, outcome: 'acked' }] }))
    })
    const e = client(t, b.url).ephemeral
    const ac = new AbortController()
    const handled = []
    const reported = []
    const loop = e.consume('q', (m) => { handled.push(m.id) }, { group: 'g', concurrency: 2, wait: 1000, signal: ac.signal, onError: (err) => reported.push(err) })
    const deadline = Date.now() + 5000
    while (b.sent('/ack').length < 3 && Date.now() < deadline) await sleep(5)
    await b.settled('/ack', 3)
    ac.abort()
    await loop
    assert.deepEqual(handled.sort(), ['e:1:Default:1', 'e:1:Default:2'])
    assert.deepEqual(reported, [])
    const acks = b.sent('/ack')
    assert.ok(acks[0].body === acks[1].body || acks[0].body === acks[2].body, 'the refused ack sent again')
    assert.equal(new Set(acks.slice(1).map((r) => r.body)).size, 2, 'each id acked once')
    for (const r of b.sent('/pop').slice(0, 3)) assert.ok(r.query.get('wait') === 'true' && r.query.get('group') === 'g', String(r.query))
  })

  test('a responder (consume with autoAck + reply) whose reply is refused by the cell delivers it once', async (t) => {
    const request = JSON.stringify({ queue: 'rpc', messages: [{ id: 'e:1:Default:1', partition: 'Default', attempts: 0, payload: { replyTo: 'inbox-a', payload: 1 } }] })
    const b = await cellBroker(t, async (r, nth) => {
      if (r.route === '/pop') {
        if (nth === 1) return answer(200, request)
        await sleep(50)
        return answer(200, '{"queue":"rpc","messages":[]}')
      }
      return nth === 1 ? refusal(Codes.OWNER_MOVED) : answer(201, '{"pushed":1}')
    })
    const e = client(t, b.url).ephemeral
    const ac = new AbortController()
    const reported = []
    const loop = e.consume('rpc', (m) => e.reply(m, 'ok'), { autoAck: true, wait: 1000, signal: ac.signal, onError: (err) => reported.push(err) })
    const deadline = Date.now() + 5000
    while (b.sent('/push').length < 2 && Date.now() < deadline) await sleep(5)
    await b.settled('/push', 2)
    ac.abort()
    await loop
    assert.deepEqual(reported, [])
    const [a, c] = b.sent('/push')
    assert.equal(a.body, c.body)
    assert.equal(JSON.parse(c.body).queue, 'inbox-a')
  })

  // A member in front of a real broker whose relay keeps failing: it refuses
  // every third request with one of the two codes, without forwarding it,
  // and forwards the others.
  async function cellProxy (t, target, link) {
    const u = new URL(target)
    if (link) return cellLinkProxy(t, u)
    const agent = new http.Agent({ keepAlive: true })
    const p = { n: 0, refused: {} }
    const server = http.createServer((req, res) => {
      const n = ++p.n
      if (n % 3 === 0) {
        const route = new URL(req.url, 'http://x').pathname.slice(API.length)
        p.refused[route] = (p.refused[route] ?? 0) + 1
        req.resume()
        res.writeHead(503, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ error: 'the cell is moving', code: CELL[n % 2] }))
        return
      }
      const up = http.request({ host: u.hostname, port: u.port, method: req.method, path: req.url, headers: req.headers, agent }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers)
        ur.pipe(res)
      })
      up.on('error', () => res.destroy())
      // The client gone (a pop parked behind a refused push): cancel upstream.
      res.on('close', () => { if (!res.writableFinished) up.destroy() })
      req.pipe(up)
    })
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    p.url = `http://127.0.0.1:${server.address().port}`
    t.after(() => { server.closeAllConnections(); server.close(); agent.destroy() })
    return p
  }

  test('every verb through a member refusing a third of all requests, to a real broker: each message once, in order, no caller sees a refusal', async (t) => {
    const b = await startBroker(t)
    const p = await cellProxy(t, b.url, mode === 'link')
    const queen = client(t, p.url, { buffer: { messageCount: 16, timeMillis: 5 } })
    const e = queen.ephemeral
    const range = (n) => Array.from({ length: n }, (_, i) => i)

    for (const i of range(60)) await e.push('plain', [i])
    for (const i of range(300)) await e.push('buffered', [i], { buffered: true })
    await e.flush()
    async function drain (queue, want, autoAck) {
      const got = []
      while (got.length < want) {
        const { messages } = await e.pop(queue, { group: 'g', batch: 50, wait: true, timeout: 1000, autoAck })
        assert.ok(messages.length > 0, `${queue}: ${got.length} of ${want}`)
        got.push(...messages.map((m) => m.payload))
        if (!autoAck) {
          const { results } = await e.ack(queue, messages, { group: 'g' })
          assert.ok(results.every((r) => r.outcome === 'acked'), JSON.stringify(results))
        }
      }
      assert.deepEqual(got, range(want))
      assert.equal((await e.pop(queue, { group: 'g', batch: 50 })).messages.length, 0, `${queue}: nothing left`)
    }
    await drain('plain', 60, false)
    await drain('buffered', 300, true)

    const ac = new AbortController()
    const reported = []
    const onError = (err) => reported.push(err)
    const responder = e.consume('rpc', (m) => e.reply(m, m.payload.payload * 2), { autoAck: true, concurrency: 4, wait: 200, signal: ac.signal, onError })
    const answers = await Promise.all(range(30).map((i) => e.request('rpc', i, { timeout: 10000 })))
    assert.deepEqual(answers.map((m) => m.payload), range(30).map((i) => i * 2))

    const handled = new Map()
    const worker = e.consume('work', (m) => { handled.set(m.payload, (handled.get(m.payload) ?? 0) + 1) }, { group: 'w', concurrency: 4, wait: 200, signal: ac.signal, onError })
    for (const i of range(40)) await e.push('work', [i])
    const deadline = Date.now() + 10000
    while (handled.size < 40 && Date.now() < deadline) await sleep(10)
    await sleep(300) // room for a duplicate to show up
    ac.abort()
    await Promise.all([responder, worker])
    assert.deepEqual([...handled.keys()].sort((a, b) => a - b), range(40))
    assert.ok([...handled.values()].every((k) => k === 1), 'each handled once')
    // The loops report only a pop that ran out of its wait while refused.
    for (const err of reported) assert.ok(err instanceof QueenError && CELL.includes(err.code) && err.path.endsWith('/pop'), String(err))
    for (const route of ['/push', '/pop', '/ack']) assert.ok(p.refused[route] > 0, `no ${route} refused: the test proves nothing`)
  })
}

// cellProxy's link: the member speaks the link to the client and forwards
// each request frame over HTTP/1.1 to the broker (a cancelled stream
// cancels the forwarded request).
async function cellLinkProxy (t, u) {
  const agent = new http.Agent({ keepAlive: true })
  const p = { n: 0, refused: {} }
  const srv = await scripted(t, (req, sock) => new Promise((resolve) => {
    const n = ++p.n
    if (n % 3 === 0) {
      const route = new URL(req.path, 'http://x').pathname.slice(API.length)
      p.refused[route] = (p.refused[route] ?? 0) + 1
      sock.write(answer(503, JSON.stringify({ error: 'the cell is moving', code: CELL[n % 2] })))
      return resolve()
    }
    const headers = req.method === 'GET' ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(req.body) }
    const up = http.request({ host: u.hostname, port: u.port, method: req.method, path: req.path, headers, agent }, (ur) => {
      const parts = []
      ur.on('data', (d) => parts.push(d))
      ur.on('end', () => {
        sock.write(answer(ur.statusCode, Buffer.concat(parts).toString(), ur.headers['retry-after'] ? `retry-after: ${ur.headers['retry-after']}\r\n` : ''))
        resolve()
      })
    })
    up.on('error', resolve)
    req.signal.addEventListener('abort', () => up.destroy())
    up.end(req.method === 'GET' ? undefined : req.body)
  }), { link: true })
  p.url = srv.url
  t.after(() => agent.destroy())
  return p
}
