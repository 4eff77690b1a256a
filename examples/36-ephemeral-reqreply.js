// The request/reply pair (docs/contract.md, "Tiers"), against a
// broker at QUEEN_URL (default http://localhost:6632) with nothing else set
// up. A responder consumes the queue "greeter"; the requester mints an inbox
// name nobody declared, sends it with the request as {replyTo, payload}, and
// parks a pop on the inbox until the answer arrives. The reply's push creates
// the inbox, and the broker collects it when it goes quiet.
import { Queen, RequestTimeoutError, parseRequest } from 'queen-mq'

const queen = new Queen(process.env.QUEEN_URL || 'http://localhost:6632')

// The responder: a consume loop answering each request to the inbox it names.
const stopResponder = new AbortController()
const responder = queen.ephemeral.consume('greeter', async (message) => {
  const { payload } = parseRequest(message)
  await queen.ephemeral.reply(message, { greeting: `hello, ${payload.name}` })
}, { group: 'greeters', concurrency: 4, wait: 1000, signal: stopResponder.signal })

// The requester: each request mints an inbox, pushes {replyTo, payload} and
// parks on the inbox.
for (const name of ['alice', 'bob']) {
  const reply = await queen.ephemeral.request('greeter', { name }, { timeout: 5000 })
  console.log('reply', reply.payload.greeting)
}

// Requests in flight at once, each on an inbox of its own.
const names = Array.from({ length: 5 }, (_, i) => `user-${i}`)
const replies = await Promise.all(names.map((name) => queen.ephemeral.request('greeter', { name }, { timeout: 5000 })))
console.log(replies.filter((r, i) => r.payload.greeting === `hello, ${names[i]}`).length, 'concurrent replies')

// Nobody consumes "nobody": the request's timeout is the failure path (the
// same one that survives a broker restart).
try {
  await queen.ephemeral.request('nobody', { name: 'carol' }, { timeout: 300 })
  throw new Error('a reply from nobody')
} catch (err) {
  if (!(err instanceof RequestTimeoutError)) throw err
  console.log('no reply from nobody: timed out')
}

stopResponder.abort()
await responder
await queen.close()
