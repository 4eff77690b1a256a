// The JS SDK (clients/js) through a real cell of three brokers, driven by
// conformance/cell_jssdk_test.go (TestCellJSSDK), which starts the brokers,
// names the queues (each owned by a known member) in QUEEN_CELL_JS and
// asserts what this script reports.
//
// Protocol: one JSON object per line on stdout. {"event":"kill"} asks the
// test to kill -9 the owner of cfg.dead and cfg.plain (member C); the test
// answers "killed" on stdin once the process is gone. The last line is
// {"event":"result", ...}. Nothing here asserts: every outcome is reported,
// errors included (name, status, code, attempts), and the Go test judges.

import readline from 'node:readline'
import { Queen } from '../../clients/js/index.js'

const cfg = JSON.parse(process.env.QUEEN_CELL_JS)
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]()

function describe (err) {
  if (!err) return null
  return { name: err.name, message: err.message, status: err.status ?? 0, code: err.code ?? '', attempts: err.attempts ?? 0 }
}

// settle runs f and reports {value} or {error}.
async function settle (f) {
  try {
    return { value: await f() }
  } catch (err) {
    return { error: describe(err) }
  }
}

// cfg.ownerRouting false: every call to the member the client was given
// (relayed to the owner); true: each queue's calls to its owner, the view
// learnt from the given member (clients/js/lib/cellview.js).
const routing = { ownerRouting: cfg.ownerRouting }
const qa = new Queen(cfg.a, routing)
const qb = new Queen(cfg.b, routing)
const qc = new Queen(cfg.c, routing)
const result = { event: 'result' }

// (1) Push through A, pop through B, ack through C, for a queue owned by
// each member; then a pop through A finds nothing left.
result.relay = []
for (const q of cfg.relay) {
  const r = { queue: q }
  r.push = await settle(() => qa.ephemeral.push(q, [{ relayed: q }]))
  r.pop = await settle(() => qb.ephemeral.pop(q, { batch: 10 }))
  r.ack = await settle(() => qc.ephemeral.ack(q, r.pop.value?.messages ?? []))
  r.after = await settle(() => qa.ephemeral.pop(q, { batch: 10 }))
  result.relay.push(r)
}

// (2) A waiting pop through B, parked for 300 ms, answered by a push
// through C.
{
  const start = Date.now()
  const waiting = settle(() => qb.ephemeral.pop(cfg.waiting, { wait: true, timeout: 5000, batch: 1 }))
  await sleep(300)
  const push = await settle(() => qc.ephemeral.push(cfg.waiting, ['woken']))
  const pushedMs = Date.now() - start
  const pop = await waiting
  result.waiting = { push, pop, pushedMs, poppedMs: Date.now() - start }
}

// (3) request() through A, the responder (consume with autoAck + reply)
// through B.
{
  const ac = new AbortController()
  const errors = []
  const responder = qb.ephemeral.consume(cfg.svc, (m) => qb.ephemeral.reply(m, { echo: m.payload.payload }), {
    autoAck: true, wait: 1000, signal: ac.signal, onError: (err) => errors.push(describe(err))
  })
  const replies = []
  for (let i = 0; i < 5; i++) {
    replies.push(await settle(async () => (await qa.ephemeral.request(cfg.svc, i, { timeout: 5000 })).payload))
  }
  ac.abort()
  await responder
  result.reqreply = { replies, errors }
}

// (4) Buffered pushes through A to cfg.dead (owned by C) through the kill
// of C. First K1 messages, flushed: every one of them was accepted by C
// before the kill, so all are lost with it. Then one message every 3 ms up
// to N, the kill asked for along the way: k2 counts the messages handed to
// push() before the kill was confirmed (an upper bound on what C can have
// been given). Right after the kill, a plain push through A with the
// default timeout (the SDK must retry the refusals itself), and one through
// a client whose 300 ms timeout ends its retries (the refusal it then
// shows). Then everything is popped from the new owner.
{
  const K1 = cfg.k1
  const N = cfg.n
  const flushErrors = []
  const buf = new Queen(cfg.a, { ...routing, buffer: { messageCount: 10, timeMillis: 10 }, onFlushError: (err) => flushErrors.push(describe(err)) })
  const bufErrors = []
  for (let i = 0; i < K1; i++) await buf.ephemeral.push(cfg.dead, [i], { buffered: true })
  const flushed = await settle(() => buf.ephemeral.flush())
  let next = K1
  const producer = (async () => {
    while (next < N) {
      const i = next++
      try {
        await buf.ephemeral.push(cfg.dead, [i], { buffered: true })
      } catch (err) {
        bufErrors.push({ i, error: describe(err) })
      }
      await sleep(3)
    }
  })()
  // A responder on B for svc2 (owned by C), parked on C when it dies.
  const ac = new AbortController()
  const responderErrors = []
  const responder = qb.ephemeral.consume(cfg.svc2, (m) => qb.ephemeral.reply(m, { echo: m.payload.payload }), {
    autoAck: true, wait: 1000, signal: ac.signal, onError: (err) => responderErrors.push(describe(err))
  })
  await sleep(60) // batches are on their way to C, the responder is parked there
  out({ event: 'kill', handed: next })
  const { value } = await lines.next()
  if (value !== 'killed') throw new Error('want "killed" on stdin, got ' + JSON.stringify(value))
  const k2 = next
  await sleep(50) // A's relay connections to C have seen it die
  const short = new Queen(cfg.a, { ...routing, timeout: 300 })
  const start = Date.now()
  let plainMs = 0
  // Issued right after the kill, all through the refusals: a waiting pop
  // through B on later (owned by C), a request() through A to svc2, and the
  // two pushes; once the plain push is accepted, a push through A wakes the
  // waiting pop, whose message is then acked through A.
  const waitingPop = settle(() => qb.ephemeral.pop(cfg.later, { wait: true, timeout: 8000, batch: 1 }))
  const request = settle(async () => (await qa.ephemeral.request(cfg.svc2, 'through', { timeout: 10000 })).payload)
  const [plain, refused] = await Promise.all([
    settle(async () => { const r = await qa.ephemeral.push(cfg.plain, ['plain']); plainMs = Date.now() - start; return r }),
    settle(() => short.ephemeral.push(cfg.plain, ['short']))
  ])
  const laterPush = await settle(() => qa.ephemeral.push(cfg.later, ['later']))
  const laterPop = await waitingPop
  const laterAck = await settle(() => qa.ephemeral.ack(cfg.later, laterPop.value?.messages ?? []))
  const reply = await request
  ac.abort()
  await responder
  await producer
  const drained = await settle(() => buf.ephemeral.flush())
  // Everything there is, popped and acked from the new owner.
  const popped = []
  const acks = {}
  let popError = null
  for (;;) {
    const r = await settle(() => qa.ephemeral.pop(cfg.dead, { batch: 100 }))
    if (r.error) { popError = r.error; break }
    if (r.value.messages.length === 0) break
    for (const m of r.value.messages) popped.push(m.payload)
    const a = await settle(() => qa.ephemeral.ack(cfg.dead, r.value.messages))
    if (a.error) { popError = a.error; break }
    for (const o of a.value.results) acks[o.outcome] = (acks[o.outcome] ?? 0) + 1
  }
  const plainPopped = await settle(() => qa.ephemeral.pop(cfg.plain, { batch: 10 }))
  result.kill = {
    k1: K1,
    k2,
    n: N,
    flushed,
    drained,
    flushErrors,
    bufErrors,
    flushRetries: buf.ephemeral.flushRetries,
    plain,
    plainMs,
    refused,
    popped,
    acks,
    popError,
    plainPopped: plainPopped.value?.messages?.map((m) => m.payload) ?? plainPopped.error,
    laterPush,
    laterPop,
    laterAck,
    reply,
    responderErrors
  }
  await Promise.allSettled([buf.close(), short.close()])
}

await Promise.allSettled([qa.close(), qb.close(), qc.close()])
out(result)
process.exit(0)
