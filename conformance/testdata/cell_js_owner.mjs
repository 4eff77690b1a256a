// Owner routing of the JS SDK (clients/js/lib/cellview.js) through a real
// cell of three, driven by conformance/cell_jssdk_owner_test.go
// (TestCellJSSDKOwnerRouting). The client is given member A's URL only.
//
// Protocol: one JSON object per line on stdout, the test answering each
// event but the last with a line on stdin once it has read the members'
// /metrics: {"event":"view"} once the client has learnt the cell's three
// members; {"event":"owned", ...} after the calls of queues owned by A and
// B; {"event":"result", ...} after those of the queue owned by C, whose
// published URL nobody listens on. Nothing here asserts: every outcome is
// reported and the Go test judges.

import readline from 'node:readline'
import { Queen } from '../../clients/js/index.js'

const cfg = JSON.parse(process.env.QUEEN_CELL_JS)
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n')
const rl = readline.createInterface({ input: process.stdin })
const lines = rl[Symbol.asyncIterator]()
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function settle (f) {
  try {
    return { value: await f() }
  } catch (err) {
    return { error: { name: err.name, message: err.message, status: err.status ?? 0, code: err.code ?? '', attempts: err.attempts ?? 0 } }
  }
}

// push, pop (waiting), ack and depth of queue q; the outcomes.
async function verbs (q, e) {
  const r = { queue: q }
  r.push = await settle(() => e.push(q, [{ to: q }]))
  r.pop = await settle(() => e.pop(q, { wait: true, timeout: 2000, batch: 10 }))
  r.ack = await settle(() => e.ack(q, r.pop.value?.messages ?? []))
  r.after = await settle(() => e.pop(q, { batch: 10 }))
  return r
}

const q = new Queen(cfg.a)
const e = q.ephemeral
await e.queues() // the first answered call: the client reads the view
const deadline = Date.now() + 10000
while ((q.transport.cell.view?.members.length ?? 0) !== 3 && Date.now() < deadline) await sleep(5)
out({ event: 'view', members: q.transport.cell.view?.members.map((m) => m.id) ?? [] })
await lines.next()

const owned = []
for (const name of cfg.owned) owned.push(await verbs(name, e))
out({ event: 'owned', owned })
await lines.next()

const far = await verbs(cfg.far, e)
out({ event: 'result', far })
await q.close()
rl.close()
