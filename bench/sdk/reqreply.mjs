// Request/reply through one JavaScript client, one target per process:
//
//   node reqreply.mjs --target queen   --addr 127.0.0.1:16632   (queen-mq)
//   node reqreply.mjs --target nats    --addr 127.0.0.1:14222   (nats.js)
//   node reqreply.mjs --target ioredis --addr 127.0.0.1:16379   (ioredis)
//   node reqreply.mjs --target undici  --addr 127.0.0.1:16632   (the broker through undici, for reference)
//
// The shape of queenbench's reqreply with -inbox request: --c requesters
// (32) each waiting for one round trip at a time, --w responders (4),
// --size-byte payloads (64, a JSON string) both ways, and a fresh reply
// address per request. --warmup seconds of load (1), then a measured window
// of --d seconds (5). It prints one JSON line (the fields of bench.SDKRun,
// which queenbench -sdk-table reads): round trips/s, p50 and p99 in µs, the
// process's own CPU per round trip (process.cpuUsage: requesters and
// responders together, client library included), the server's CPU per
// round trip when --pid names it, and errors. A line a second goes to
// stderr unless --quiet.
//
// Each target is driven the way its own documentation shows, as a new user
// would write it:
// - queen: queen-mq; requesters share one Queen and call
//   queen.ephemeral.request(queue, payload), which mints a fresh inbox per
//   call; responders share another Queen and loop on
//   pop(queue, {wait, batch, autoAck}) then reply(message, payload) for each
//   message, the replies of a batch concurrently.
// - nats: nats.js; requesters share one connection and call nc.request (a
//   fresh reply subject per request, muxed on one subscription); responders
//   are --w subscriptions of one queue group on another connection, each
//   answering with msg.respond.
// - ioredis: a connection per requester and per responder, as a blocking
//   command needs one; a requester pipelines RPUSH requests "<key>|<payload>"
//   and BLPOP <key> on a key of its own for this request (Redis deletes the
//   list when BLPOP empties it, so no key lingers); responders BLMPOP up to
//   --rbatch requests and pipeline an RPUSH of each reply.
// - undici: see undiciDriver.

import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'

const { values: opt } = parseArgs({
  options: {
    target: { type: 'string' },
    addr: { type: 'string' },
    d: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '1' },
    c: { type: 'string', default: '32' },
    w: { type: 'string', default: '4' },
    size: { type: 'string', default: '64' },
    rbatch: { type: 'string', default: '16' },
    pid: { type: 'string', default: '0' },
    quiet: { type: 'boolean', default: false }
  }
})

const defaults = { queen: '127.0.0.1:6632', nats: '127.0.0.1:4222', ioredis: '127.0.0.1:6379', undici: '127.0.0.1:6632' }
const target = opt.target
if (!(target in defaults)) fail(`--target ${target}: queen, nats, ioredis or undici`)
const addr = opt.addr ?? defaults[target]
const D = Number(opt.d)
const warmup = Number(opt.warmup)
const C = Number(opt.c)
const W = Number(opt.w)
const size = Number(opt.size)
const rbatch = Number(opt.rbatch)
const pid = Number(opt.pid)
if (!(D > 0) || !(warmup >= 0) || !(C >= 1) || !(W >= 1) || !(size >= 3) || !(rbatch >= 1)) fail('bad numbers')

function fail (msg) {
  console.error('reqreply.mjs: ' + msg)
  process.exit(2)
}

const ns = 'qb' + randomBytes(4).toString('hex')
// A JSON string of exactly size bytes, as queenbench's payloads are.
const text = 't' + 'x'.repeat(size - 3)
const json = JSON.stringify(text)
const bytes = Buffer.from(json)
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// --- the three drivers: each gives open(), request(i), serve(i, signal), close() ---

async function queenDriver () {
  const { Queen } = await import('queen-mq')
  const url = 'http://' + addr
  const requesters = new Queen(url)
  const responders = new Queen(url)
  const queue = ns + '-requests'
  return {
    client: 'queen-mq',
    server: 'broker',
    role: 'ours',
    async request () {
      const m = await requesters.ephemeral.request(queue, text, { timeout: 30000 })
      if (m.payload == null) throw new Error('a reply without a payload')
    },
    async serve (_, signal) {
      while (!signal.aborted) {
        let messages
        try {
          ({ messages } = await responders.ephemeral.pop(queue, { wait: true, timeout: 1000, batch: rbatch, autoAck: true, signal }))
        } catch (err) {
          if (signal.aborted) return
          throw err
        }
        await Promise.all(messages.map(m => responders.ephemeral.reply(m, text)))
      }
    },
    async close () {
      await Promise.allSettled([requesters.close(), responders.close()])
    }
  }
}

async function natsDriver () {
  const { connect } = await import('nats')
  const servers = addr
  const nc = await connect({ servers, name: 'reqreply-requesters' })
  const rc = await connect({ servers, name: 'reqreply-responders' })
  const subject = ns + '.requests'
  let failed = null
  for (let i = 0; i < W; i++) {
    rc.subscribe(subject, {
      queue: 'responders',
      callback: (err, msg) => {
        if (err) { failed ??= err; return }
        if (!msg.respond(bytes)) failed ??= new Error('a request without a reply subject')
      }
    })
  }
  await rc.flush() // the server has the subscriptions before the first request
  return {
    client: 'nats.js',
    server: 'nats',
    role: 'peer',
    async request () {
      if (failed) throw failed
      await nc.request(subject, bytes, { timeout: 30000 })
    },
    async serve (_, signal) {
      await new Promise(resolve => signal.addEventListener('abort', resolve, { once: true }))
      if (failed) throw failed
    },
    async close () {
      await Promise.allSettled([nc.close(), rc.close()])
    }
  }
}

async function ioredisDriver () {
  const { default: Redis } = await import('ioredis')
  const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))]
  const conns = []
  const open = async () => {
    const r = new Redis({ host, port, lazyConnect: true, maxRetriesPerRequest: 0 })
    await r.connect()
    conns.push(r)
    return r
  }
  const reqKey = ns + ':requests'
  const req = []
  for (let i = 0; i < C; i++) req.push({ r: await open(), seq: 0 })
  const resp = []
  for (let i = 0; i < W; i++) resp.push(await open())
  return {
    client: 'ioredis',
    server: 'redis',
    role: 'peer',
    async request (i) {
      const q = req[i]
      const key = ns + ':inbox:' + i + ':' + (++q.seq)
      const res = await q.r.pipeline().rpush(reqKey, key + '|' + json).blpop(key, 30).exec()
      if (res[0][0]) throw res[0][0]
      if (res[1][0]) throw res[1][0]
      if (!res[1][1]) throw new Error('BLPOP timed out')
    },
    async serve (i, signal) {
      const r = resp[i]
      while (!signal.aborted) {
        let got
        try {
          got = await r.blmpop(1, 1, reqKey, 'LEFT', 'COUNT', rbatch)
        } catch (err) {
          if (signal.aborted) return
          throw err
        }
        if (!got) continue // a second without requests
        const p = r.pipeline()
        for (const v of got[1]) {
          const bar = v.indexOf('|')
          if (bar < 0) throw new Error('a request the responder cannot read: ' + v.slice(0, 80))
          p.rpush(v.slice(0, bar), json)
        }
        const res = await p.exec()
        for (const [err] of res) if (err) throw err
      }
    },
    async close () {
      for (const r of conns) r.disconnect()
    }
  }
}

// undici: the broker through a plain HTTP client, for reference (the row of
// the table): a Pool with its defaults, no pipelining, three calls
// per round trip (the requester's push, then its pop on the fresh inbox; the
// responder's reply push), the same JSON the SDK sends.
async function undiciDriver () {
  const { Pool } = await import('undici')
  const url = 'http://' + addr
  const requesters = new Pool(url)
  const responders = new Pool(url)
  const queue = ns + '-requests'
  const json = { 'content-type': 'application/json' }
  const seq = new Array(C).fill(0)
  const call = async (pool, method, path, body, want, signal) => {
    const res = await pool.request({ method, path, headers: body ? json : undefined, body, signal })
    if (res.statusCode !== want) throw new Error(`${method} ${path.slice(0, 40)} answered ${res.statusCode}: ${await res.body.text()}`)
    return res.body.json()
  }
  const pop = (q, batch, timeout) => `/api/v1/ephemeral/pop?queue=${q}&batch=${batch}&wait=true&timeout=${timeout}&autoAck=true`
  return {
    client: 'undici Pool (reference: 3 plain HTTP calls per round trip)',
    server: 'broker',
    role: 'reference',
    async request (i) {
      const inbox = `${ns}-inbox-${i}-${++seq[i]}`
      await call(requesters, 'POST', '/api/v1/ephemeral/push',
        JSON.stringify({ queue, messages: [{ payload: { replyTo: inbox, payload: text } }] }), 201)
      for (;;) {
        const { messages } = await call(requesters, 'GET', pop(inbox, 1, 30000), undefined, 200)
        if (messages.length > 0) return
      }
    },
    async serve (_, signal) {
      while (!signal.aborted) {
        let messages
        try {
          ({ messages } = await call(responders, 'GET', pop(queue, rbatch, 1000), undefined, 200, signal))
        } catch (err) {
          if (signal.aborted) return
          throw err
        }
        await Promise.all(messages.map(m => call(responders, 'POST', '/api/v1/ephemeral/push',
          JSON.stringify({ queue: m.payload.replyTo, messages: [{ payload: text }] }), 201)))
      }
    },
    async close () {
      await Promise.allSettled([requesters.destroy(), responders.destroy()])
    }
  }
}

// --- measuring ---

// The target's user+system CPU so far, in µs (Linux /proc; null without --pid).
function targetCPU () {
  if (!pid) return null
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ')
    return (Number(f[11]) + Number(f[12])) * 1e4 // USER_HZ 100: a tick is 10,000 µs
  } catch {
    return null
  }
}

function cpuMark () {
  const u = process.cpuUsage()
  return { self: u.user + u.system, target: targetCPU(), done }
}

function quantile (sorted, q) {
  if (sorted.length === 0) return 0
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]
}

let done = 0 // round trips completed, window or not
let errors = 0
let firstError = null

async function main () {
  const drivers = { queen: queenDriver, nats: natsDriver, ioredis: ioredisDriver, undici: undiciDriver }
  const drv = await drivers[target]()
  const stopServe = new AbortController()
  let serveError = null
  const serving = []
  for (let i = 0; i < W; i++) {
    serving.push(drv.serve(i, stopServe.signal).catch(err => { serveError ??= err }))
  }

  const ns0 = process.hrtime.bigint()
  const wStart = ns0 + BigInt(Math.round(warmup * 1e9))
  const wEnd = wStart + BigInt(Math.round(D * 1e9))
  const samples = []
  let inWindow = 0

  // The CPU marks: at the window's start and end; the round trips done
  // between the two marks divide the CPU, so a late timer skews nothing.
  let m0 = null
  let m1 = null
  const marks = (async () => {
    await sleep(warmup * 1e3)
    m0 = cpuMark()
    await sleep(D * 1e3)
    m1 = cpuMark()
  })()

  let last = 0
  const ticker = opt.quiet
    ? null
    : setInterval(() => {
      const t = Number(process.hrtime.bigint() - ns0) / 1e9
      const phase = m1 ? 'stopping' : m0 ? 'measure' : 'warmup'
      process.stderr.write(`reqreply/${drv.client} ${phase} ${t.toFixed(0)}s ${done - last} ops/s ${done} ops\n`)
      last = done
    }, 1000)

  const requester = async i => {
    for (;;) {
      const t0 = process.hrtime.bigint()
      if (t0 >= wEnd || serveError) return
      try {
        await drv.request(i)
      } catch (err) {
        errors++
        firstError ??= err
        await sleep(10)
        continue
      }
      const t1 = process.hrtime.bigint()
      done++
      if (t1 >= wStart && t1 < wEnd) {
        inWindow++
        samples.push(Number(t1 - t0) / 1e3)
      }
    }
  }
  const reqs = []
  for (let i = 0; i < C; i++) reqs.push(requester(i))
  await Promise.all(reqs)
  await marks
  if (ticker) clearInterval(ticker)

  const lat = Float64Array.from(samples).sort()
  const between = m1.done - m0.done
  const result = {
    lang: 'js',
    client: drv.client,
    target: drv.server,
    role: drv.role,
    ops: inWindow,
    seconds: D,
    rate: inWindow / D,
    p50Us: quantile(lat, 0.5),
    p90Us: quantile(lat, 0.9),
    p99Us: quantile(lat, 0.99),
    maxUs: lat.length ? lat[lat.length - 1] : 0,
    clientUsPerOp: between > 0 ? (m1.self - m0.self) / between : 0,
    clientCores: (m1.self - m0.self) / (D * 1e6),
    targetUsPerOp: between > 0 && m0.target != null && m1.target != null ? (m1.target - m0.target) / between : -1,
    errors: errors + (serveError ? 1 : 0),
    firstError: firstError ? String(firstError.message ?? firstError) : serveError ? 'responder: ' + String(serveError.message ?? serveError) : undefined,
    params: { requesters: C, responders: W, respBatch: rbatch, size, inbox: 'request', warmup, node: process.version }
  }
  console.log(JSON.stringify(result))

  stopServe.abort()
  const closing = (async () => {
    await Promise.allSettled(serving)
    await drv.close()
  })()
  await Promise.race([closing, sleep(5000)])
  process.exit(serveError || inWindow === 0 ? 1 : 0)
}

main().catch(err => {
  console.error('reqreply.mjs:', err)
  process.exit(1)
})
