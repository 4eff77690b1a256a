// The HTTP/1.1 transport's failure paths (lib/transport.js, lib/http1.js): against a
// real broker over real TCP where the broker can produce the condition, and
// against a scripted TCP server where it cannot (bytes split anyhow, a
// Connection: close, a trickled answer, a reset, silence).

import { test } from 'node:test'
import assert from 'node:assert/strict'
import tls from 'node:tls'
import { readFileSync } from 'node:fs'
import { Queen, QueenError, ConnectionError, RequestTimeoutError, Codes, parseRequest } from '../index.js'
import { ResponseParser } from '../lib/http1.js'
import { startBroker, freePort } from './broker.js'
import { scripted, answer } from './scripted.js'

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// These are the HTTP/1.1 transport's tests (the fallback, and forceHTTP);
// the link's are in link.test.js.
function client (t, url, options) {
  const q = new Queen(url, { forceHTTP: true, ...options })
  t.after(() => q.close().catch(() => {}))
  return q
}

async function trickle (sock, bytes, size, pause) {
  for (let i = 0; i < bytes.length && !sock.destroyed; i += size) {
    sock.write(bytes.subarray(i, i + size))
    await sleep(pause)
  }
}

// Run over a link too: the restart is the same story there.
for (const forceHTTP of [true, false]) {
  test(`broker restarted during request(): a clear error at once, then the client works again${forceHTTP ? '' : ' (on a link)'}`, async (t) => {
    const b = await startBroker(t)
    const queen = client(t, b.url, { forceHTTP })
    const e = queen.ephemeral
    const start = Date.now()
    const pending = assert.rejects(e.request('nobody-yet', 'hello', { timeout: 20000 }), (err) => {
      assert.ok(err instanceof ConnectionError, String(err))
      assert.equal(err.sent, true, 'the pop had reached the broker')
      assert.equal(err.dial, false)
      return true
    })
    await sleep(200) // the push answered, the inbox pop parked
    await b.kill()
    await pending
    assert.ok(Date.now() - start < 3000, 'no hang until the timeout')

    await b.start(b.port)
    const ac = new AbortController()
    const errors = []
    const responder = e.consume('rpc', async (m) => {
      await e.reply(m, parseRequest(m).payload + '!')
    }, { concurrency: 4, wait: 500, signal: ac.signal, onError: (err) => errors.push(err) })
    const r = await e.request('rpc', 'again', { timeout: 5000 })
    assert.equal(r.payload, 'again!')

    // A consume loop survives a restart under it: the parked pop's connection
    // resets, the loop reports it and comes back once the broker does.
    await b.kill()
    await sleep(100)
    await b.start(b.port)
    const r2 = await e.request('rpc', 'after', { timeout: 10000 })
    assert.equal(r2.payload, 'after!')
    assert.ok(errors.length >= 1 && errors.every((err) => err instanceof ConnectionError), `errors: ${errors}`)
    ac.abort()
    await responder
  })
}

test('a parked pop whose connection is reset rejects with ECONNRESET', async (t) => {
  const srv = await scripted(t, (req, sock) => {
    if (req.path.includes('wait=true')) setTimeout(() => sock.resetAndDestroy(), 100)
    else sock.write(answer(200, '{"queue":"q","messages":[]}'))
  })
  const e = client(t, srv.url).ephemeral
  const start = Date.now()
  await assert.rejects(e.pop('q', { wait: true, timeout: 5000 }), (err) => {
    assert.ok(err instanceof ConnectionError, String(err))
    assert.equal(err.code, 'ECONNRESET')
    assert.equal(err.sent, true)
    return true
  })
  assert.ok(Date.now() - start < 2000)
  // Short calls on the shared connections were not in its way.
  assert.deepEqual((await e.pop('q')).messages, [])
})

test('failover: a URL that refuses the dial hands over to the next, for every kind of call', async (t) => {
  const b = await startBroker(t)
  const dead = `http://127.0.0.1:${await freePort()}`
  const queen = client(t, [dead, b.url])
  const e = queen.ephemeral
  assert.deepEqual(await e.push('f', [1]), { pushed: 1 })
  assert.equal(queen.url, b.url)

  const q2 = client(t, [dead, b.url])
  assert.equal((await q2.ephemeral.pop('f', { wait: true, timeout: 1000 })).messages[0].payload, 1)
  assert.equal(q2.url, b.url)

  const q3 = client(t, [dead, b.url])
  const ac = new AbortController()
  const responder = e.consume('rpc', (m) => e.reply(m, 'pong'), { wait: 500, signal: ac.signal })
  assert.equal((await q3.ephemeral.request('rpc', 'ping', { timeout: 5000 })).payload, 'pong')
  assert.equal(q3.url, b.url)
  ac.abort()
  await responder

  // Every URL refusing: the dial error, not a hang.
  const none = client(t, [dead, `http://127.0.0.1:${await freePort()}`])
  await assert.rejects(none.ephemeral.push('f', [1]), (err) => err instanceof ConnectionError && err.dial && err.code === 'ECONNREFUSED' && !err.sent)
  await assert.rejects(none.ephemeral.request('rpc', 1, { timeout: 1000 }), (err) => err instanceof ConnectionError && err.dial)
})

test('answers split across TCP segments, byte by byte, pipelined, chunked and after a 100 Continue', async (t) => {
  const listing = JSON.stringify({ queues: [], count: 0, cellBytes: 7 })
  const srv = await scripted(t, async (req, sock, n) => {
    let out
    if (req.path.endsWith('/queues')) {
      const half = listing.length >> 1
      out = 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n' +
        half.toString(16) + ';ext=1\r\n' + listing.slice(0, half) + '\r\n' +
        (listing.length - half).toString(16) + '\r\n' + listing.slice(half) + '\r\n0\r\nx-trailer: 1\r\n\r\n'
    } else if (req.path.includes('/depth')) {
      out = answer(404, '{"error":"no such queue","code":"ephemeral_queue_not_found"}')
    } else {
      out = answer(201, JSON.stringify({ pushed: JSON.parse(req.body).messages.length, n }))
    }
    await trickle(sock, Buffer.from(out), 1, 0) // one byte per write
  })
  const e = client(t, srv.url).ephemeral
  const [a, l, d, c] = await Promise.allSettled([e.push('q', [1, 2]), e.queues(), e.depth('q'), e.push('q', [3])])
  assert.deepEqual(a.value, { pushed: 2, n: 1 })
  assert.deepEqual(l.value, { queues: [], count: 0, cellBytes: 7 })
  assert.equal(d.reason.status, 404)
  assert.equal(d.reason.code, Codes.QUEUE_NOT_FOUND)
  assert.deepEqual(c.value, { pushed: 1, n: 4 })
  assert.equal(srv.connections, 1, 'pipelined on one connection')
})

test('Connection: close from the server: the answer counts, the calls behind it go again on a fresh connection', async (t) => {
  const srv = await scripted(t, (req, sock, n) => {
    if (n === 1) {
      sock.end(answer(201, '{"pushed":1}', 'connection: close\r\n'))
      return
    }
    sock.write(answer(201, JSON.stringify({ pushed: 1, n })))
  })
  const e = client(t, srv.url).ephemeral
  // Issued in one tick: they leave in one write on one connection; the
  // server reads all three but answers only the first and closes, so the
  // other two, pushes included, provably were not processed.
  const r = await Promise.all([e.push('q', [1]), e.push('q', [2]), e.queues()])
  assert.deepEqual(r[0], { pushed: 1 })
  assert.ok(r[1].n > 3 && r[2].n > 3, 'answered by the second connection')
  assert.equal(srv.connections, 2)

  // An HTTP/1.0-style answer without a length, ended by the close.
  const srv2 = await scripted(t, (req, sock) => sock.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{"queues":[],"count":0,"cellBytes":1}'))
  const e2 = client(t, srv2.url).ephemeral
  assert.deepEqual(await e2.queues(), { queues: [], count: 0, cellBytes: 1 })
  assert.deepEqual(await e2.queues(), { queues: [], count: 0, cellBytes: 1 })
  assert.equal(srv2.connections, 2)
})

test('a large answer trickled slowly arrives whole; a silent server meets the timeout', async (t) => {
  const big = JSON.stringify({ queue: 'q', messages: Array.from({ length: 2000 }, (_, i) => ({ id: `e:1:p:${i}`, partition: 'p', attempts: 0, payload: 'y'.repeat(200) + i })) })
  const srv = await scripted(t, (req, sock) => {
    if (req.path.includes('silent')) return
    return trickle(sock, Buffer.from(answer(200, big)), 16384, 2)
  })
  const e = client(t, srv.url, { timeout: 400 }).ephemeral
  const r = await e.pop('q', { batch: 2000 })
  assert.equal(r.messages.length, 2000)
  assert.equal(r.messages[1999].payload, 'y'.repeat(200) + 1999)

  const start = Date.now()
  await assert.rejects(e.pop('silent'), (err) => err.name === 'TimeoutError')
  const took = Date.now() - start
  assert.ok(took >= 390 && took < 1500, `timed out after ${took} ms`)
})

test("request()'s timeout bounds its push: a server that never answers the push releases the caller at that timeout, not the client's call timeout", async (t) => {
  const srv = await scripted(t, () => {}) // reads every request, answers none
  const e = client(t, srv.url, { timeout: 60000 }).ephemeral
  const start = Date.now()
  await assert.rejects(e.request('q', 'x', { timeout: 300 }), (err) => err.name === 'TimeoutError')
  const took = Date.now() - start
  // The old bound was the call timeout (60 s here): anything near the
  // request's own 300 ms, with room for a loaded machine, is the new one.
  assert.ok(took >= 290 && took < 10000, `released after ${took} ms`)
})

test('the retry rule: a reused connection dying with no answer repeats a safe call, never a push', async (t) => {
  const srv = await scripted(t, (req, sock, n) => {
    // Each connection answers its first request and drops the second
    // without a byte, as a server closing an idle connection would.
    sock.served = (sock.served ?? 0) + 1
    if (sock.served === 2) {
      sock.destroy()
      return
    }
    sock.write(answer(req.method === 'POST' ? 201 : 200, req.path.endsWith('/queues') ? '{"queues":[],"count":0,"cellBytes":0}' : '{"pushed":1}'))
  })
  const e = client(t, srv.url).ephemeral
  await e.queues()
  assert.deepEqual(await e.queues(), { queues: [], count: 0, cellBytes: 0 }, 'repeated on a fresh connection')
  assert.equal(srv.connections, 2)
  await assert.rejects(e.push('q', [1]), (err) => {
    assert.ok(err instanceof ConnectionError)
    assert.equal(err.sent, true, 'the push may have been delivered')
    return true
  })
  assert.equal(srv.requests, 4, 'the push was not repeated')
})

test('a caller\'s signal cancels a short call and a parked pop', async (t) => {
  const srv = await scripted(t, async (req, sock) => {
    if (req.path.includes('slow')) {
      await sleep(300)
      if (!sock.destroyed) sock.write(answer(200, '{"queue":"slow","messages":[]}'))
    } else if (!req.path.includes('wait=true')) sock.write(answer(200, '{"queue":"q","messages":[]}'))
  })
  const e = client(t, srv.url).ephemeral
  const ac = new AbortController()
  const slow = e.pop('slow', { signal: ac.signal })
  const after = e.pop('q')
  setTimeout(() => ac.abort(), 50)
  await assert.rejects(slow, (err) => err.name === 'AbortError')
  assert.deepEqual((await after).messages, [], 'the call behind it on the pipeline still answered')

  const ac2 = new AbortController()
  const parked = e.pop('q', { wait: true, timeout: 10000, signal: ac2.signal })
  await sleep(50)
  const before = srv.sockets.size
  ac2.abort()
  await assert.rejects(parked, (err) => err.name === 'AbortError')
  await sleep(50)
  assert.equal(srv.sockets.size, before - 1, 'the parked pop\'s connection was closed')
  await assert.rejects(e.pop('q', { signal: AbortSignal.abort() }), (err) => err.name === 'AbortError')
})

test('request(): a refused push rejects at once and closes the connection its inbox pop parked on', async (t) => {
  const b = await startBroker(t)
  const e = client(t, b.url).ephemeral
  const start = Date.now()
  await assert.rejects(e.request('bad\x01queue', 1, { timeout: 10000 }), (err) => {
    assert.ok(err instanceof QueenError)
    assert.equal(err.status, 400)
    assert.equal(err.code, Codes.BAD_REQUEST)
    assert.equal(err.path, '/api/v1/ephemeral/push')
    return true
  })
  assert.ok(Date.now() - start < 2000)
  await assert.rejects(e.request('nobody', 1, { timeout: 200 }), RequestTimeoutError)
})

test('the queue listing above 256 queues comes chunked and parses whole', async (t) => {
  const b = await startBroker(t)
  const e = client(t, b.url).ephemeral
  await Promise.all(Array.from({ length: 300 }, (_, i) => e.push(`q-${i}`, [i])))
  const { queues, count } = await e.queues()
  assert.equal(count, 300)
  assert.equal(queues.length, 300)
  assert.deepEqual(new Set(queues.map((q) => q.queue)).size, 300)
})

test('the response parser: any split of pipelined answers gives the same answers', () => {
  const stream = Buffer.from(
    'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}' +
    'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many\r\nretry-after: 2\r\ncontent-length: 5\r\n\r\nslow!' +
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n' +
    'HTTP/1.1 204 No Content\r\n\r\n' +
    'HTTP/1.1 201 Created\r\nConnection: close\r\nContent-Length: 3\r\n\r\nxyz')
  const want = [[200, '{}', '', false], [429, 'slow!', '2', false], [200, 'abcde', '', false], [204, '', '', false], [201, 'xyz', '', true]]
  for (let size = 1; size <= stream.length; size++) {
    const got = []
    const p = new ResponseParser((status, body, retryAfter, close) => got.push([status, body.toString(), retryAfter, close]))
    for (let i = 0; i < stream.length; i += size) p.feed(stream.subarray(i, i + size))
    assert.deepEqual(got, want, `pieces of ${size}`)
  }
  assert.throws(() => new ResponseParser(() => {}).feed(Buffer.from('SSH-2.0-x\r\n\r\n')), /malformed/)
})

test('https: the same transport over TLS, the certificate checked', async (t) => {
  // A self-signed certificate for 127.0.0.1 and localhost (test/fixtures,
  // made with openssl req -x509 -newkey ec, valid ten years).
  const cert = readFileSync(new URL('./fixtures/localhost-cert.pem', import.meta.url))
  const key = readFileSync(new URL('./fixtures/localhost-key.pem', import.meta.url))
  let requests = 0
  const server = tls.createServer({ key, cert }, (sock) => {
    sock.on('error', () => {})
    let buf = ''
    sock.on('data', (d) => {
      buf += d
      let end
      while ((end = buf.indexOf('\r\n\r\n')) >= 0) {
        const len = +(/content-length: *(\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0)
        if (buf.length < end + 4 + len) return
        buf = buf.slice(end + 4 + len)
        requests++
        sock.write(answer(201, '{"pushed":1}'))
      }
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => server.close())
  const url = `https://127.0.0.1:${server.address().port}`

  // ownerRouting off: this server answers every request as a push, the
  // cell's view read (test/cellroute.test.js) included.
  const trusting = client(t, url, { ownerRouting: false })
  trusting.transport.tls = { ca: cert }
  assert.deepEqual(await Promise.all([trusting.ephemeral.push('q', [1]), trusting.ephemeral.push('q', [2])]), [{ pushed: 1 }, { pushed: 1 }])
  assert.equal(requests, 2)

  // Without the CA the handshake fails before anything is sent.
  await assert.rejects(client(t, url).ephemeral.push('q', [1]), (err) => err instanceof ConnectionError && err.dial && !err.sent)
  assert.equal(requests, 2)
})
