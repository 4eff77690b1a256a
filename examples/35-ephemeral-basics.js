// "The whole surface in one program" (docs/contract.md, docs/routes.md):
// six verbs and two status reads, against a broker at QUEEN_URL (default
// http://localhost:6632) with nothing else set up. Run `npm install` in this
// directory first (it links ../clients/js as queen-mq), then
// `node 35-ephemeral-basics.js`.
import { Queen } from 'queen-mq'

const queen = new Queen(process.env.QUEEN_URL || 'http://localhost:6632')

const QUEUE = 'presence'
const ROOM = 'room-7'

// configure: declare the queue and its bounds. Optional, because a push or a pop
// that names an unknown queue creates it. These options are durable; the contents
// never are.
await queen.ephemeral.configure(QUEUE, {
  maxLength: 1000,
  maxBytes: 1024 * 1024,
  policy: 'dropOldest',
  ttlSeconds: 30,
  leaseSeconds: 15,
  retryLimit: 3
})

// push: one queue per request, all or nothing, answering { pushed }.
const { pushed } = await queen.ephemeral.push(QUEUE, [
  { user: 'alice', typing: true },
  { user: 'bob', typing: true }
], { partition: ROOM })
console.log('pushed', pushed)

// queues and depth: gauges read out of the broker's own memory, with no database
// behind them, so a dashboard can poll them every second for free.
console.log(await queen.ephemeral.queues())
console.log(await queen.ephemeral.depth(QUEUE))

// pop: the group is the consumption semantics. `wait` is a real long poll parked
// on a memory gate, with no polling interval anywhere behind it.
const { messages } = await queen.ephemeral.pop(QUEUE, {
  partition: ROOM,
  group: 'widget',
  batch: 10,
  wait: true,
  timeout: 2000
})
console.log('popped', messages.map(m => m.payload.user).join(', '))

// ack: with the same group the pop used, because cursors are per group. An
// unacknowledged message redelivers when its lease expires, with attempts+1.
const { results } = await queen.ephemeral.ack(QUEUE, messages, { group: 'widget' })
console.log('outcomes', results.map(r => r.outcome).join(', '))

// A second group over the same ring receives everything the first one consumed.
// Fan-out is another group name and nothing else.
const audit = await queen.ephemeral.pop(QUEUE, { partition: ROOM, group: 'audit', batch: 10 })
console.log('the audit group saw', audit.messages.length)

// reset: drop every message, void every lease, rewind every cursor. A verb that
// would be indefensible on a durable queue, and merely honest here.
const { dropped } = await queen.ephemeral.reset(QUEUE)
console.log('reset dropped', dropped)

// delete: the contents, the cursors, and the declared configuration.
await queen.ephemeral.delete(QUEUE)

await queen.close()
