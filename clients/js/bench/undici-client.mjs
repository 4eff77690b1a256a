// The undici candidate of the transport evaluation (docs/sdk-transport-js.md):
// just enough of queen-mq's surface for bench/reqreply.mjs (request, pop,
// reply, close) built on undici's Pool, the way its documentation suggests:
// keep-alive connections with pipelining for short calls, `blocking: true`
// for the parked pops (no call is pipelined behind one), and request()'s
// push and inbox pop issued together. Not shipped; load it with
//   UNDICI=/path/to/node_modules/undici/index.js node bench/reqreply.mjs --client bench/undici-client.mjs
// UNDICI_PIPELINING and UNDICI_CONNECTIONS tune the Pool.
import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { Pool } = require(process.env.UNDICI ?? 'undici')
const API = '/api/v1/ephemeral'
const JSON_HEADERS = { accept: 'application/json', 'content-type': 'application/json' }
const GET_HEADERS = { accept: 'application/json' }

export function parseRequest (m) { return { replyTo: m.payload.replyTo, payload: m.payload.payload } }

export class Queen {
  constructor (url) {
    this.pool = new Pool(url, {
      pipelining: Number(process.env.UNDICI_PIPELINING ?? 10),
      connections: Number(process.env.UNDICI_CONNECTIONS ?? 64),
      keepAliveTimeout: 60000
    })
    this.ephemeral = new Ephemeral(this)
  }

  async call (method, path, body, blocking = false) {
    const { statusCode, body: b } = await this.pool.request({
      method, path, body, blocking, headers: body === undefined ? GET_HEADERS : JSON_HEADERS
    })
    const text = await b.text()
    if (statusCode < 200 || statusCode > 299) throw new Error(`${method} ${path}: ${statusCode} ${text}`)
    return text ? JSON.parse(text) : {}
  }

  async close () { await this.pool.close() }
}

class Ephemeral {
  constructor (q) { this.q = q }

  push (queue, payloads) {
    return this.q.call('POST', API + '/push', JSON.stringify({ queue, messages: payloads.map((payload) => ({ payload })) }))
  }

  async pop (queue, { group, batch, wait, timeout, autoAck } = {}) {
    let path = API + '/pop?queue=' + encodeURIComponent(queue)
    if (group) path += '&group=' + encodeURIComponent(group)
    if (batch) path += '&batch=' + batch
    if (wait) path += '&wait=true&timeout=' + timeout
    if (autoAck) path += '&autoAck=true'
    const r = await this.q.call('GET', path, undefined, !!wait)
    r.messages ??= []
    return r
  }

  async reply (m, payload) { await this.push(m.payload.replyTo, [payload]) }

  async request (queue, payload, { timeout = 30000 } = {}) {
    const inbox = 'inbox-' + randomBytes(16).toString('hex')
    const deadline = Date.now() + timeout
    let pop = this.pop(inbox, { batch: 1, wait: true, timeout, autoAck: true })
    const push = this.push(queue, [{ replyTo: inbox, payload }])
    push.catch(() => {})
    for (;;) {
      const r = await pop
      await push
      if (r.messages.length) return r.messages[0]
      const left = deadline - Date.now()
      if (left < 1) throw new Error('timeout')
      pop = this.pop(inbox, { batch: 1, wait: true, timeout: left, autoAck: true })
    }
  }
}
