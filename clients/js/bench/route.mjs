// The client's own cost of owner routing (lib/cellview.js), per call, with
// a view of three members: drawing a request's inbox owned by its queue's
// owner (inboxFor: about N draws, each minted and hashed), minting one
// inbox name alone, and routing a name (one hash). ns per call, 100,000
// calls, four rounds (the first warms up).
//
//   node bench/route.mjs
import { CellView } from '../lib/cellview.js'
import { newInbox } from '../index.js'

const transport = { memberPool: () => ({ downUntil: 0 }), callTimeout: 30000 }
const view = new CellView(transport)
view.apply(Buffer.from(JSON.stringify({
  generation: 1,
  tenant: '',
  members: [1, 2, 3].map((i) => ({ id: `127.0.0.1:700${i}`, url: `http://127.0.0.1:663${i}` }))
})))
const N = 100000
const names = Array.from({ length: N }, () => newInbox())
const time = (f) => {
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < N; i++) f(i)
  return (Number(process.hrtime.bigint() - t0) / N).toFixed(0)
}
let sink = 0
for (let r = 0; r < 4; r++) {
  const a = time(() => { sink += view.inboxFor('rr-service', newInbox).length })
  const b = time(() => { sink += newInbox().length })
  const c = time((i) => { sink += view.route(names[i]) === null ? 0 : 1 })
  console.log(JSON.stringify({ inboxForNs: +a, newInboxNs: +b, routeNs: +c }))
}
if (sink === 0) console.log('')
