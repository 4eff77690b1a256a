// The JS SDK's share of the cell's chaos run (conformance/cell_chaos_sdks_test.go,
// used by TestCellChaos): clients of queen-mq making the calls the Go test
// asks for, while the test kills, pauses and adds members. Nothing here
// judges: every outcome goes back to the test, which checks it against the
// request it answers as it does the Go SDK's.
//
// Configuration: QUEEN_CHAOS_JS = {"clients": [[url, ...], ...], "timeout": ms}:
// one Queen per list (owner routing on, links on: the defaults), its first URL
// the one it starts on.
//
// Protocol: one JSON object a line. In (stdin): {"id", "client", "op", ...},
// op one of
//   push      {queue, payloads: [text]}        answered {pushed}
//   pop       {queue, group, batch, wait: ms}  answered {queue, messages}
//   ack       {queue, group, ids}              answered {results}
//   configure {queue, options}                 answered {queue, options}
//   request   {queue, payload: text, timeout}  answered the reply, a message
//   serve     {queue, wait: ms}                a responder, answered at once:
//             consume with autoAck, replying each request's payload as is
// and {"op": "close"} last. Payloads travel as JSON text and are pushed as
// the values they spell. Out (stdout): {"id", "value"} or {"id", "error"}
// for each call; {"event": "served", "queue", "payload": text} for each
// request a responder took; {"event": "serveError", "error", "ended"} for what a
// responder survived (or, ended, did not); {"event": "closed"} once every client has closed.

import readline from 'node:readline'
import { Queen, parseRequest } from '../../clients/js/index.js'

const cfg = JSON.parse(process.env.QUEEN_CHAOS_JS)
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n')
const clients = cfg.clients.map((urls) => new Queen(urls, { timeout: cfg.timeout }))
const stopServing = new AbortController()
const serving = []

function errorOf (err) {
  return {
    name: err?.name ?? 'Error',
    message: err?.message ?? String(err),
    status: err?.status ?? 0,
    code: typeof err?.code === 'string' ? err.code : '',
    attempts: err?.attempts ?? 0,
    sent: err?.sent ?? false,
    dial: err?.dial ?? false
  }
}

async function run (m) {
  const e = clients[m.client].ephemeral
  switch (m.op) {
    case 'push':
      return e.push(m.queue, m.payloads.map((p) => JSON.parse(p)))
    case 'pop':
      return e.pop(m.queue, { group: m.group, batch: m.batch, wait: true, timeout: m.wait })
    case 'ack':
      return e.ack(m.queue, m.ids, { group: m.group, status: 'completed' })
    case 'configure':
      return e.configure(m.queue, m.options)
    case 'request':
      return e.request(m.queue, JSON.parse(m.payload), { timeout: m.timeout })
    case 'serve':
      serving.push(e.consume(m.queue, async (msg) => {
        const req = parseRequest(msg)
        out({ event: 'served', queue: m.queue, payload: JSON.stringify(req.payload) })
        await e.reply(msg, req.payload)
      }, {
        autoAck: true,
        concurrency: 4,
        wait: m.wait,
        signal: stopServing.signal,
        onError: (err) => out({ event: 'serveError', error: errorOf(err) })
      }).catch((err) => out({ event: 'serveError', ended: true, error: errorOf(err) })))
      return {}
    default:
      throw new Error('chaos_js: unknown op ' + m.op)
  }
}

const rl = readline.createInterface({ input: process.stdin })
for await (const line of rl) {
  const m = JSON.parse(line)
  if (m.op === 'close') break
  run(m).then((value) => out({ id: m.id, value }), (err) => out({ id: m.id, error: errorOf(err) }))
}
stopServing.abort()
await Promise.allSettled(serving)
await Promise.allSettled(clients.map((q) => q.close()))
out({ event: 'closed' })
