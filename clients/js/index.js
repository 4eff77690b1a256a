// queen-mq: the JavaScript client of Queen MQ's ephemeral queues.
// ESM, zero runtime dependencies (Node 20.3 or later): every call on a link
// (lib/link.js, docs/link.md) per broker URL, or HTTP/1.1 of its own over
// node:net where the broker does not speak links (lib/transport.js).

import { Transport, ConnectionError } from './lib/transport.js'
import { randomHex } from './lib/entropy.js'
import { CellRetry, isCellRefusal, sleep, jitter } from './lib/cellretry.js'

export { ConnectionError }

const API = '/api/v1/ephemeral'

/**
 * The codes of the specification's refusal taxonomy, plus `ephemeral_unsupported`.
 * The same list as the Go SDK's Code* constants (client/codes_test.go checks it).
 * OWNER_MOVED and FORWARD_FAILED come only from a cell of several brokers and
 * say the request was not applied: the client sends such a call again by
 * itself, with backoff, within the call's bounds (lib/cellretry.js).
 */
export const Codes = Object.freeze({
  BAD_REQUEST: 'ephemeral_bad_request',
  QUOTA_EXCEEDED: 'ephemeral_quota_exceeded',
  FEATURE_GATED: 'feature_gated',
  QUEUE_NOT_FOUND: 'ephemeral_queue_not_found',
  QUEUE_FULL: 'queue_full',
  RATE_LIMITED: 'rate_limited',
  CONFIGURE_FAILED: 'ephemeral_configure_failed',
  DELETE_FAILED: 'ephemeral_delete_failed',
  UNAVAILABLE: 'ephemeral_unavailable',
  OWNER_MOVED: 'owner_moved',
  FORWARD_FAILED: 'ephemeral_forward_failed',
  DISABLED: 'ephemeral_disabled',
  UNSUPPORTED: 'ephemeral_unsupported'
})

/** A refusal answered by the broker: `status` and the spec's `code`. */
export class QueenError extends Error {
  constructor ({ status, code, message, retryAfter = 0, method, path }) {
    super(`queen: ${method} ${path}: ${status} ${code}: ${message}`)
    this.name = 'QueenError'
    this.status = status
    this.code = code
    this.detail = message
    this.retryAfter = retryAfter
    this.method = method
    this.path = path
    /** How many times the call was sent: 1, or more for a cell refusal retried until its bounds ended. */
    this.attempts = 1
  }

  /** A 429 or a 503: come back later. */
  get temporary () { return this.status === 429 || this.status === 503 }
}

/** Buffered messages that could not be delivered; `cause` is the last error. */
export class FlushError extends Error {
  constructor ({ queue, partition, messages, cause }) {
    super(`queen: buffered push to ${JSON.stringify(queue)} (partition ${JSON.stringify(partition ?? '')}): ${messages} messages not delivered: ${cause?.message}`, { cause })
    this.name = 'FlushError'
    this.queue = queue
    this.partition = partition
    this.messages = messages
    this.code = cause?.code
    this.status = cause?.status
  }
}

/** No reply arrived within the request's timeout. */
export class RequestTimeoutError extends Error {
  constructor (queue, timeout) {
    super(`queen: request to ${JSON.stringify(queue)} got no reply within ${timeout} ms`)
    this.name = 'RequestTimeoutError'
    this.code = 'request_timeout'
  }
}

/** A call made after close() began. */
export class ClosedError extends Error {
  constructor () {
    super('queen: client closed')
    this.name = 'ClosedError'
    this.code = 'client_closed'
  }
}

const noop = () => {}

// Whether a failed call is worth trying again after a pause: a 429 or 503,
// or a connection failure. The transport itself never repeats a call that
// may have reached the broker; the two loops that call this do, by their
// documented contracts: a consume loop's pop (no autoAck: a lost answer only
// leases), and a buffered push (at-least-once, README "Buffered pushes").
function retryable (err) {
  if (err instanceof QueenError) return err.temporary
  return err instanceof ConnectionError
}

// A loop's pause after err (consume): the broker's Retry-After when it sent
// one, else the backoff with jitter.
function pause (backoff, err) {
  return err instanceof QueenError && err.retryAfter > 0 ? err.retryAfter : jitter(backoff)
}

// encodeURIComponent rather than URLSearchParams: same decoding on the
// broker, a fraction of the cost.
function queryString (query) {
  let s = ''
  for (const k in query) {
    const v = query[k]
    if (v === undefined || v === null || v === '') continue
    s += (s ? '&' : '?') + k + '=' + encodeURIComponent(String(v))
  }
  return s
}

// The constant request headers as one string of `name: value` lines.
function headerLines (headers, token) {
  const all = { accept: 'application/json', ...headers }
  if (token) all.authorization = `Bearer ${token}`
  let s = ''
  for (const [k, v] of Object.entries(all)) {
    const name = k.toLowerCase()
    if (!/^[!#$%&'*+.^`|~0-9a-z_-]+$/.test(name)) throw new TypeError(`queen: header name ${JSON.stringify(k)}`)
    if (/[\r\n\0]/.test(String(v))) throw new TypeError(`queen: header ${k}: value holds a line break`)
    if (name === 'host' || name === 'content-length' || name === 'content-type' || name === 'transfer-encoding' || name === 'connection') continue
    s += name + ': ' + v + '\r\n'
  }
  return s
}

function parseRetryAfter (v) {
  if (!v) return 0
  const s = Number(v)
  if (Number.isFinite(s) && s >= 0) return s * 1000
  const t = Date.parse(v)
  return Number.isNaN(t) ? 0 : Math.max(0, t - Date.now())
}

// Inbox names are 128 random bits, unguessable (lib/entropy.js).

/** Mint a queue name nobody declared, for one reply. */
export function newInbox () {
  return 'inbox-' + randomHex(16)
}

/** Decode a message pushed by `request()`: `{ replyTo, payload }`. */
export function parseRequest (message) {
  const p = message?.payload
  if (!p || typeof p !== 'object' || typeof p.replyTo !== 'string' || p.replyTo === '') {
    throw new TypeError('queen: the message carries no replyTo')
  }
  return { replyTo: p.replyTo, payload: p.payload }
}

const DEFAULT_BUFFER = { messageCount: 100, timeMillis: 100, maxPending: 10000, retryTimeout: 30000, maxBackoff: 1000 }

// bufferOptions fills the defaults. retryTimeout means what the Go SDK's
// RetryTimeout means: 0 (or unset) is the default, 30 s; a negative value
// (or Infinity) retries until close() gives up.
function bufferOptions (given = {}) {
  const b = { ...DEFAULT_BUFFER, ...given }
  if (!b.retryTimeout) b.retryTimeout = DEFAULT_BUFFER.retryTimeout
  return b
}

/**
 * The client. `new Queen(url)` or `new Queen([url1, url2])`: the other URLs are
 * tried in turn when the one in use cannot be reached. The ephemeral verbs are
 * on `queen.ephemeral`.
 */
export class Queen {
  constructor (urls, options = {}) {
    const list = Array.isArray(urls) ? urls : [urls]
    if (list.length === 0) throw new TypeError('queen: at least one broker URL')
    this.urls = list.map((u) => {
      const url = new URL(u)
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`queen: broker URL ${u}: want http(s)://host[:port]`)
      return url.href.replace(/\/+$/, '')
    })
    this.token = options.token
    this.headers = { ...(options.headers ?? {}) }
    this.timeout = options.timeout ?? 30000
    // A token function's token is not a constant header: the transport
    // caches it and renews it (lib/token.js).
    const tokenFn = typeof this.token === 'function' ? this.token : undefined
    this.transport = new Transport(this.urls, headerLines(this.headers, tokenFn ? undefined : this.token), {
      links: options.forceHTTP ? 0 : 1,
      token: tokenFn,
      callTimeout: this.timeout,
      ownerRouting: options.ownerRouting
    })
    this.closed = false
    this.closeController = new AbortController()
    this.ephemeral = new Ephemeral(this, bufferOptions(options.buffer), options.onFlushError)
  }

  /** The broker URL in use. */
  get url () { return this.urls[this.transport.current] }

  /** The index of the URL in use. */
  get current () { return this.transport.current }

  /**
   * One call. `safe`: it may be repeated on a fresh connection when it
   * provably got no answer (lib/transport.js); `exclusive`: it parks, so it
   * takes a connection of its own; `depth` marks the one route whose 404 has
   * a code of its own; `cell` (the default): a cell refusal
   * (lib/cellretry.js) is sent again, within the client's timeout from the
   * first send and the signal. `queue`: the call is that queue's, and goes
   * to its owner in a cell (lib/cellview.js).
   */
  async _call (method, route, { query, body, timeout = this.timeout, signal, depth = false, safe = false, exclusive = false, cell = true, queue } = {}) {
    const path = API + route + (query ? queryString(query) : '')
    const data = body === undefined ? undefined : JSON.stringify(body)
    const start = Date.now()
    const res = await this.transport.roundTrip(method, path, data, { timeout, signal, safe, exclusive, queue })
    if (res.status === 503 && cell) return this._callAgain(res, start, method, route, path, data, { timeout, signal, depth, safe, exclusive, queue })
    return this._answer(res, method, API + route, depth)
  }

  /** _call's retries of a call answered `res`, a 503, first sent at `start`. */
  async _callAgain (res, start, method, route, path, data, { timeout, signal, depth, safe, exclusive, queue }) {
    const retry = new CellRetry(start, this.timeout)
    for (;;) {
      const err = this._error(res, method, API + route, depth)
      if (!isCellRefusal(err)) throw err
      await this._cellWait(retry, err, signal)
      const left = retry.left()
      if (timeout > 0 && left < timeout) timeout = left // the retries stay within the first send's bound
      res = await this.transport.roundTrip(method, path, data, { timeout, signal, safe, exclusive, queue })
      if (res.status !== 503) return this._answer(res, method, API + route, depth)
    }
  }

  /**
   * Before a call refused by the cell is sent again: the view is read
   * afresh (owner routing: the refusal says ownership moved or the owner is
   * gone; one read shared by every refusal meanwhile, within what the bound
   * leaves), then the backoff is waited (lib/cellretry.js).
   */
  async _cellWait (retry, err, signal) {
    const cell = this.transport.cell
    if (cell !== null) await cell.refresh(retry.left() - 50)
    await retry.again(err, signal)
  }

  /** The parsed body of a 2xx answer, or the QueenError of any other. */
  _answer (res, method, path, depth = false) {
    if (res.status < 200 || res.status > 299) throw this._error(res, method, path, depth)
    return res.body.length > 0 ? JSON.parse(res.body.toString()) : {}
  }

  /** The QueenError of a non-2xx answer. */
  _error ({ status, body, retryAfter }, method, path, depth = false) {
    const text = body.length > 0 ? body.toString() : ''
    let code = ''
    let message = text.slice(0, 512)
    try {
      const j = JSON.parse(text)
      code = j.code ?? ''
      message = j.error ?? message
    } catch {}
    if (status === 404 && (!depth || code !== Codes.QUEUE_NOT_FOUND)) code = Codes.UNSUPPORTED
    return new QueenError({ status, code, message, retryAfter: parseRetryAfter(retryAfter), method, path })
  }

  /**
   * request()'s round trip: the push of the request and the waiting pop on
   * its inbox leave together in one write, on one link (lib/link.js), or,
   * over HTTP/1.1, on a connection of their own whose answers are read in
   * order. When the push is refused the pop is still parked on the broker,
   * so it is given up: its stream cancelled, or that connection closed.
   *
   * A cell refusal (lib/cellretry.js) of the push means the request was not
   * delivered: it is pushed again after a backoff, with a fresh inbox (no pop
   * left behind on the old one can take the reply). One of the inbox pop
   * means the request was delivered: the inbox is parked on again after a
   * backoff, the request is not pushed again. Both within the timeout.
   */
  async _request (queue, payload, partition, timeout, signal) {
    const t = this.transport
    const start = Date.now()
    const deadline = start + timeout
    const pushPath = API + '/push'
    const popPath = (inbox, left) => API + '/pop?queue=' + encodeURIComponent(inbox) + '&batch=1&wait=true&timeout=' + left + '&autoAck=true'
    let dials = 0
    let repeated = false
    let viaHTTP = false
    let retry = null
    let alt = null // another member of the cell when no configured URL can be dialled
    let inbox = t.inbox(queue, newInbox)
    let matched = t.inboxMatched
    for (;;) {
      const auth = t.authorize()
      if (auth !== undefined) await auth
      if (signal?.aborted) throw signal.reason
      const body = { queue, messages: [{ payload: { replyTo: inbox, payload } }] }
      if (partition) body.partition = partition
      const idx = t.current
      const home = alt ?? t.pools[idx]
      // In a cell (owner routing, lib/cellview.js) the push goes to the
      // queue's owner and the pop to the inbox's; one pool when they are
      // the same member (or outside a cell), and then the two leave in one
      // write as before.
      const pool = t.route(queue) ?? home
      let popPool = matched ? pool : t.route(inbox) ?? home
      let left = Math.max(1, Math.floor(deadline - Date.now()))
      // The request's timeout bounds its push too, not only the wait for
      // the reply: a broker that never answers the push must not hold the
      // caller for the client's call timeout past it.
      const pushCall = t.call('POST', pushPath, JSON.stringify(body), Math.min(this.timeout, left), signal, false)
      const onLink = !viaHTTP && pool.linkable(pushCall)
      const conn = onLink ? pool.link() : pool.lease()
      let popViaHTTP = viaHTTP
      let popConn = null // a leased connection of popPool's, when the pop goes elsewhere over HTTP/1.1
      const leave = () => {
        if (popConn !== null) popConn.pool.release(popConn)
        popConn = null
      }
      let pop = null
      const park = () => {
        const c = t.call('GET', popPath(inbox, left), undefined, left + this.timeout, signal, false)
        let carrier
        if (popPool === pool) {
          // A re-park goes on any link of the URL (a fresh one if that died).
          carrier = onLink && pop ? pool.link() : conn
        } else if (!popViaHTTP && popPool.linkable(c)) {
          carrier = popPool.link()
        } else {
          popConn ??= popPool.lease()
          carrier = popConn
        }
        return { call: c, answer: carrier.send(c) }
      }
      const push = conn.send(pushCall)
      pop = park()
      pop.answer.catch(noop) // awaited below unless the push fails first
      try {
        let res
        try {
          res = await push
        } catch (err) {
          pop.call.cancel(new ConnectionError('the request\'s push failed', { sent: false }))
          // Provably unsent (a failed dial, a connection the server was
          // closing, a refused upgrade): safe to send again, over HTTP/1.1
          // after a refused upgrade, through the configured URL after an
          // owner's failed dial, on the next URL after a dial failure.
          if (err instanceof ConnectionError && !signal?.aborted && !err.sent) {
            if (err.fallback) { viaHTTP = true; continue }
            if (err.dial && pool !== home) { t.down(pool); continue }
            if (!err.dial && !repeated) { repeated = true; continue }
            if (err.dial && ++dials < t.pools.length) { t.failover(idx); continue }
            if (err.dial && (alt = t.alternative(pool)) !== null) continue
          }
          throw err
        }
        if (res.status < 200 || res.status > 299) {
          pop.call.cancel(new ConnectionError('the request\'s push was refused', { sent: false }))
          const err = this._error(res, 'POST', pushPath)
          if (!isCellRefusal(err)) throw err
          retry ??= new CellRetry(start, timeout)
          await this._cellWait(retry, err, signal)
          inbox = t.inbox(queue, newInbox)
          matched = t.inboxMatched
          continue
        }
        let unsent = 0
        for (;;) {
          try {
            res = await pop.answer
          } catch (err) {
            // The pop went to the inbox's owner alone and never reached it
            // (a failed dial, a refused upgrade): parked again, through the
            // configured URL (or over HTTP/1.1). The request was delivered.
            if (!(err instanceof ConnectionError) || signal?.aborted || err.sent || popPool === pool || ++unsent > 3) throw err
            if (err.fallback) popViaHTTP = true
            else if (err.dial) {
              t.down(popPool)
              leave()
              popPool = home
            }
            pop = park()
            continue
          }
          if (res.status === 503) {
            const err = this._error(res, 'GET', API + '/pop')
            if (!isCellRefusal(err)) throw err
            retry ??= new CellRetry(start, timeout)
            await this._cellWait(retry, err, signal)
            // The view may have moved the inbox.
            const next = t.route(inbox) ?? home
            if (next !== popPool) {
              leave()
              popPool = next
            }
          } else {
            const r = this._answer(res, 'GET', API + '/pop')
            if (r.messages?.length > 0) return r.messages[0]
          }
          left = Math.floor(deadline - Date.now())
          if (left < 1) throw new RequestTimeoutError(queue, timeout)
          pop = park()
        }
      } finally {
        if (!onLink) pool.release(conn)
        leave()
      }
    }
  }

  /** Flush buffered pushes, stop consume loops. Rejects with every flush that failed. */
  async close () {
    if (this.closed) return
    this.closed = true
    let err
    try {
      await this.ephemeral.flush()
    } catch (e) {
      err = e
    }
    this.closeController.abort()
    this.transport.close()
    if (err) throw err
  }
}

class PushBuffer {
  constructor (eph, queue, partition) {
    this.eph = eph
    this.queue = queue
    this.partition = partition
    this.msgs = []
    this.oldest = 0
    this.running = null
    this.flushReq = 0
    this.errors = []
    this.wake = null
  }

  add (payload) {
    if (this.msgs.length === 0) this.oldest = Date.now()
    this.msgs.push(payload)
    if (!this.running) {
      this.running = this.run()
    } else if (this.msgs.length >= this.eph.buffer.messageCount) {
      this.wake?.()
    }
  }

  // The one runner of this buffer; it never rejects (a failed batch is
  // recorded as a FlushError).
  async run () {
    const cfg = this.eph.buffer
    const batchMax = Math.min(cfg.messageCount, 10000)
    for (;;) {
      if (this.msgs.length === 0) {
        // An add() from here on, before run() has resumed, must start a
        // new runner: clear it in the same tick as the last look.
        this.running = null
        return
      }
      const age = Date.now() - this.oldest
      if (this.msgs.length < batchMax && this.flushReq === 0 && age < cfg.timeMillis) {
        await new Promise((resolve) => {
          const t = setTimeout(done, cfg.timeMillis - age)
          const self = this
          function done () { clearTimeout(t); self.wake = null; resolve() }
          this.wake = done
        })
        continue
      }
      const batch = this.msgs.splice(0, batchMax)
      if (this.msgs.length) this.oldest = Date.now()
      try {
        await this.send(batch)
      } catch (cause) {
        const fe = new FlushError({ queue: this.queue, partition: this.partition, messages: cause.undelivered ?? batch.length, cause: cause.error ?? cause })
        this.errors.push(fe)
        if (this.eph.onFlushError) queueMicrotask(() => this.eph.onFlushError(fe))
      } finally {
        this.eph._release(batch.length)
      }
    }
  }

  async send (batch) {
    const cfg = this.eph.buffer
    const deadline = cfg.retryTimeout > 0 ? Date.now() + cfg.retryTimeout : Infinity // negative: forever
    let backoff = 10
    let size = batch.length
    let rest = batch
    while (rest.length > 0) {
      const k = Math.min(size, rest.length)
      try {
        // cell: false: a cell refusal is retried here, as any 503.
        await this.eph._pushNow(this.queue, this.partition, rest.slice(0, k), undefined, false)
        rest = rest.slice(k)
        backoff = 10
        continue
      } catch (error) {
        if (!retryable(error)) throw { undelivered: rest.length, error } // eslint-disable-line no-throw-literal
        let wait = backoff / 2 + Math.random() * backoff / 2
        if (error instanceof QueenError) {
          if (error.retryAfter > 0) wait = error.retryAfter
          if (error.code === Codes.QUEUE_FULL && size > 1) size = Math.max(1, Math.floor(size / 2))
        }
        if (Date.now() + wait > deadline) throw { undelivered: rest.length, error } // eslint-disable-line no-throw-literal
        this.eph.flushRetries++
        await sleep(wait)
        backoff = Math.min(backoff * 2, cfg.maxBackoff)
      }
    }
  }

  takeErrors () {
    const errs = this.errors
    this.errors = []
    return errs
  }
}

function joinErrors (errs) {
  if (errs.length === 0) return null
  if (errs.length === 1) return errs[0]
  return new AggregateError(errs, `queen: ${errs.length} buffered flushes failed`)
}

/** The verbs of /api/v1/ephemeral. Reach it as `queen.ephemeral`. */
export class Ephemeral {
  constructor (queen, buffer, onFlushError) {
    this.queen = queen
    this.buffer = buffer
    this.onFlushError = onFlushError
    this.buffers = new Map()
    this.pending = 0
    this.slotWaiters = []
    this.flushRetries = 0
  }

  async configure (queue, options = {}, { signal } = {}) {
    return this.queen._call('POST', '/configure', { body: { queue, options }, signal, safe: true })
  }

  /**
   * Push payloads (plain values, each wrapped as `{payload}`). With `buffered`,
   * they are queued client-side and sent in batches; the call waits while the
   * client already holds `buffer.maxPending` messages, and first rejects with
   * any failed flush of the same queue and partition.
   */
  async push (queue, payloads, { partition, buffered = false, signal } = {}) {
    if (this.queen.closed) throw new ClosedError()
    if (!Array.isArray(payloads)) throw new TypeError('queen: payloads must be an array')
    if (!buffered) return this._pushNow(queue, partition, payloads, signal)
    const key = JSON.stringify([queue, partition ?? ''])
    let b = this.buffers.get(key)
    if (!b) {
      b = new PushBuffer(this, queue, partition)
      this.buffers.set(key, b)
    }
    const failed = joinErrors(b.takeErrors())
    if (failed) throw failed
    for (let i = 0; i < payloads.length; i++) {
      JSON.stringify(payloads[i]) // throws now rather than in a flush
      await this._acquire()
      b.add(payloads[i])
    }
    return { pushed: payloads.length }
  }

  _pushNow (queue, partition, payloads, signal, cell = true) {
    const body = { queue, messages: payloads.map((payload) => ({ payload })) }
    if (partition) body.partition = partition
    return this.queen._call('POST', '/push', { body, signal, cell, queue })
  }

  async _acquire () {
    if (this.pending < this.buffer.maxPending) {
      this.pending++
      return
    }
    await new Promise((resolve) => this.slotWaiters.push(resolve))
  }

  _release (n) {
    for (let i = 0; i < n; i++) {
      const next = this.slotWaiters.shift()
      if (next) next() // the slot passes to a waiting producer
      else this.pending--
    }
  }

  /** Send every buffered message now; rejects with the flushes that failed. */
  async flush () {
    const bufs = [...this.buffers.values()]
    for (const b of bufs) { b.flushReq++; b.wake?.() }
    try {
      for (;;) {
        const running = bufs.map((b) => b.running).filter(Boolean)
        if (running.length === 0) break
        await Promise.all(running)
      }
    } finally {
      for (const b of bufs) b.flushReq--
    }
    const failed = joinErrors(bufs.flatMap((b) => b.takeErrors()))
    if (failed) throw failed
  }

  /**
   * A pop refused by the cell (nothing was taken) is sent again after a
   * backoff, a waiting pop with what is left of its `timeout`, until that
   * timeout (the client's `timeout` for a pop that does not wait or leaves
   * the wait to the broker) or the signal ends it; then the last refusal is
   * thrown.
   */
  async pop (queue, { partition, group, batch, wait = false, timeout, autoAck = false, signal } = {}) {
    const start = Date.now()
    let retry = null
    for (;;) {
      let t = this.queen.timeout
      if (wait) t = timeout > 0 ? t + timeout : 0
      try {
        const res = await this.queen._call('GET', '/pop', {
          query: { queue, partition, group, batch, wait: wait ? 'true' : undefined, timeout, autoAck: autoAck ? 'true' : undefined },
          timeout: t,
          signal,
          // A pop without autoAck leases what it takes: a repeat redelivers
          // nothing twice that a lost answer had not already leased.
          safe: !autoAck,
          exclusive: wait,
          cell: false, // retried here, where the wait can shrink
          queue
        })
        res.messages ??= []
        return res
      } catch (err) {
        if (!isCellRefusal(err)) throw err
        retry ??= new CellRetry(start, wait && timeout > 0 ? timeout : this.queen.timeout)
        await this.queen._cellWait(retry, err, signal)
        if (wait && timeout > 0) {
          // The wait is the caller's, not each send's.
          timeout = Math.floor(retry.left())
          if (timeout < 1) throw err
        }
      }
    }
  }

  /** Ack messages (objects with an `id`, or ids) with one status; one outcome per id. */
  async ack (queue, messages, { group, status, signal } = {}) {
    const acks = messages.map((m) => {
      const a = { id: typeof m === 'string' ? m : m.id }
      if (status) a.status = status
      return a
    })
    const body = { queue, acks }
    if (group) body.group = group
    return this.queen._call('POST', '/ack', { body, signal, queue })
  }

  async reset (queue, { signal } = {}) {
    return this.queen._call('POST', '/reset', { body: { queue }, signal, safe: true })
  }

  async delete (queue, { signal } = {}) {
    return this.queen._call('DELETE', '/queue/' + encodeURIComponent(queue), { signal, safe: true })
  }

  async queues ({ signal } = {}) {
    return this.queen._call('GET', '/queues', { signal, safe: true })
  }

  async depth (queue, { group, signal } = {}) {
    return this.queen._call('GET', '/queues/' + encodeURIComponent(queue) + '/depth', { query: { group }, signal, depth: true, safe: true, queue })
  }

  /**
   * Push `{replyTo, payload}` to queue with a fresh inbox and park on the inbox
   * until the reply arrives; resolves with the reply message, rejects with
   * RequestTimeoutError after `timeout` ms (default 30000).
   */
  async request (queue, payload, { timeout = 30000, partition, signal } = {}) {
    if (this.queen.closed) throw new ClosedError()
    return this.queen._request(queue, payload, partition, timeout, signal)
  }

  /** Push payload to the inbox named by a message `request()` pushed. */
  async reply (message, payload, { signal } = {}) {
    const { replyTo } = parseRequest(message)
    await this.push(replyTo, [payload], { signal })
  }

  /**
   * Pop queue with long polls and run `handler(message, {signal})` on each,
   * at most `concurrency` at once; acks `completed` when it resolves and
   * `failed` when it throws. With `autoAck` the pops ack what they take
   * (at-most-once, no ack call per message: request/reply responders, whose
   * requesters time out anyway) and a handler's failure goes to `onError`. Resolves when `signal` aborts or the client
   * closes, after the handlers in flight have settled and been acked.
   */
  async consume (queue, handler, { group, partition, concurrency = 1, batch, wait = 10000, autoAck = false, signal, onError } = {}) {
    const stop = AbortSignal.any([this.queen.closeController.signal, ...(signal ? [signal] : [])])
    const inflight = new Set()
    const stopped = new Promise((resolve) => {
      if (stop.aborted) resolve()
      else stop.addEventListener('abort', resolve, { once: true })
    })
    const maxBatch = batch ?? concurrency
    let backoff = 10
    try {
      while (!stop.aborted) {
        while (inflight.size >= concurrency && !stop.aborted) {
          await Promise.race([...inflight, stopped])
        }
        if (stop.aborted) break
        const free = Math.min(concurrency - inflight.size, maxBatch)
        let res
        try {
          res = await this.pop(queue, { group, partition, batch: free, wait: true, timeout: wait, autoAck, signal: stop })
        } catch (err) {
          if (stop.aborted) break
          if (!retryable(err)) throw err
          onError?.(err)
          await sleep(pause(backoff, err), stop)
          backoff = Math.min(backoff * 2, 1000)
          continue
        }
        backoff = 10
        for (const m of res.messages) {
          const p = (async () => {
            let status = 'completed'
            try {
              await handler(m, { signal: stop })
            } catch (err) {
              if (autoAck) { onError?.(err); return }
              status = 'failed'
            }
            if (autoAck) return // acked by the pop itself
            try {
              await this.ack(queue, [m], { group, status })
            } catch (err) {
              onError?.(err)
            }
          })()
          inflight.add(p)
          p.then(() => inflight.delete(p))
        }
      }
    } finally {
      await Promise.allSettled([...inflight])
    }
  }
}

export default Queen
